"""Every client of the process shares one TLS context: httpx builds (and loads the CA bundle into)
a context for each client it makes otherwise, which the harness paid for every client it built."""

from __future__ import annotations

import ssl

from pytest_qualify.client import endpoint
from pytest_qualify.client.endpoint import QualifyClient, tls_context


def test_clients_build_one_tls_context_between_them(monkeypatch):
    made = []
    real = ssl.create_default_context

    def counted(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counted)
    monkeypatch.setattr(endpoint, "_TLS", [])
    try:
        clients = [QualifyClient("http://127.0.0.1:9", "k", "m", 5.0) for _ in range(3)]
        for client in clients:
            assert client.openai is not None and client.http is not None
            client._forget_connections()  # a reconnection builds new clients, on the same context
            assert client.openai is not None and client.http is not None
        assert len(made) == 1
    finally:
        for client in clients:
            client.close()


def test_the_shared_context_verifies_certificates():
    context = tls_context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


def test_preload_imports_the_sdk_and_builds_the_context_on_a_helper_thread():
    import subprocess
    import sys

    code = (
        "import sys, threading\n"
        "from pytest_qualify.client import endpoint\n"
        "assert 'openai' not in sys.modules and not endpoint._TLS\n"
        "thread = endpoint.preload()\n"
        "assert thread is not threading.current_thread() and thread.daemon\n"
        "thread.join(120)\n"
        "assert 'openai.types.chat' in sys.modules, sorted(m for m in sys.modules if m.startswith('openai'))[:5]\n"
        "assert len(endpoint._TLS) == 1 and endpoint.tls_context() is endpoint._TLS[0]\n"
        "print('preloaded')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and done.stdout.strip() == "preloaded", done.stderr[-2000:]
