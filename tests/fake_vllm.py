"""A real child process standing in for ``vllm serve`` in launch-mode tests, and helpers to use it.

As a script it takes vLLM's command line (``serve MODEL --served-model-name N --max-model-len L
--host H --port P``; other vLLM flags are accepted and ignored) plus behaviour switches, from argv
or from ``FAKE_VLLM_ARGS`` (so one profile serves many tests)::

    --startup-s S              log progress lines for S seconds before listening
    --exit-during-startup CODE after the startup lines, exit with CODE instead of serving
    --report-root R            /v1/models reports root R (an identity mismatch)
    --report-max-model-len L   /v1/models reports max_model_len L
    --ignore-sigterm S         on SIGTERM, keep running S more seconds
    --spawn-child              start a child process of its own (like vLLM's EngineCore) that
                               ignores SIGTERM, so only a kill of the whole group removes it
    --fault NAME[=ARG]         a reference-server fault (e.g. slow=30)

Once listening it answers like the reference server (whose request handling it reuses), with the
identity taken from its command line; with ``VLLM_API_KEY`` set it requires that key, and logs
it (as a careless server might). ``FAKE_VLLM_LAUNCH_LOG`` names a file that gets one line per
start; ``FAKE_VLLM_EVENTS`` a file of events (``leader PID``, ``child PID``, ``chat``, ``sigterm``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve()


def _event(line: str) -> None:
    path = os.environ.get("FAKE_VLLM_EVENTS")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def _log(line: str) -> None:
    print(f"INFO {time.strftime('%H:%M:%S')} [fake-vllm] {line}", flush=True)


def _engine_core() -> int:
    # Like an engine process that does not exit on SIGTERM: only SIGKILL of the group ends it.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _event(f"child {os.getpid()}")
    while True:
        time.sleep(1)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--engine-core"]:
        return _engine_core()
    parser = argparse.ArgumentParser(prog="fake_vllm")
    parser.add_argument("command", nargs="?", default="serve")
    parser.add_argument("model", nargs="?", default="fake/model")
    parser.add_argument("--model", dest="model_flag")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--startup-s", type=float, default=0.0)
    parser.add_argument("--exit-during-startup", type=int, default=None)
    parser.add_argument("--report-root", default=None)
    parser.add_argument("--report-max-model-len", type=int, default=None)
    parser.add_argument("--ignore-sigterm", type=float, default=0.0)
    parser.add_argument("--spawn-child", action="store_true")
    parser.add_argument("--fault", action="append", default=[])
    args, _ignored = parser.parse_known_args(argv + shlex.split(os.environ.get("FAKE_VLLM_ARGS", "")))
    model = args.model_flag or args.model

    launch_log = os.environ.get("FAKE_VLLM_LAUNCH_LOG")
    if launch_log:
        with open(launch_log, "a", encoding="utf-8") as fh:
            fh.write(f"start pid={os.getpid()} host={args.host} port={args.port}\n")
    _event(f"leader {os.getpid()}")

    if args.ignore_sigterm > 0:
        def on_term(signum: int, frame: object) -> None:
            _event("sigterm")
            _log(f"SIGTERM received; exiting in {args.ignore_sigterm:g} s")
            threading.Timer(args.ignore_sigterm, lambda: os._exit(0)).start()

        signal.signal(signal.SIGTERM, on_term)

    if args.spawn_child:
        subprocess.Popen([sys.executable, str(HERE), "--engine-core"], stdin=subprocess.DEVNULL)

    flags = {"max_model_len": args.max_model_len}
    if os.environ.get("VLLM_API_KEY"):
        # As a server may: its own flags, secret included, in its log (the harness must scrub it).
        flags["api_key"] = os.environ["VLLM_API_KEY"]
    _log(f"vLLM API server (fake) for {model}: non-default args {flags}")
    started = time.monotonic()
    step = 0
    while time.monotonic() - started < args.startup_s:
        step += 1
        _log(f"Loading safetensors checkpoint shards: step {step}")
        time.sleep(0.2)
    if args.exit_during_startup is not None:
        print("ERROR [fake-vllm] torch.OutOfMemoryError: CUDA out of memory (simulated)", flush=True)
        return args.exit_during_startup

    from dataclasses import replace

    from pytest_qualify.profiles import load_profile
    from pytest_qualify.reference import handler
    from pytest_qualify.reference.faults import Faults

    base = load_profile("small")
    profile = replace(
        base,
        deployment=replace(base.deployment, model=args.report_root or model,
                           served_name=args.served_model_name or model),
        limits=replace(base.limits, window_tokens=args.report_max_model_len or args.max_model_len),
    )
    original_chat = handler.Handler._chat

    def chat(self: handler.Handler, body: object) -> None:
        _event("chat")
        original_chat(self, body)

    handler.Handler._chat = chat  # type: ignore[method-assign]
    _log(f"Starting vLLM API server on http://{args.host}:{args.port}")
    handler.serve(args.host, args.port, profile, Faults.parse(args.fault),
                  api_key=os.environ.get("VLLM_API_KEY") or None)
    return 0


# -- helpers for the tests that launch it -----------------------------------------------------------


def fake_command(*switches: str) -> str:
    """A --qualify-serve-command value that launches this fake in place of ``vllm serve``."""
    return shlex.join([sys.executable, str(HERE), "serve", "{model}", *switches])


def read_events(path: Path) -> list[str]:
    try:
        return path.read_text().splitlines()
    except OSError:
        return []


def event_pid(path: Path, kind: str) -> int | None:
    for line in read_events(path):
        if line.startswith(kind + " "):
            return int(line.split()[1])
    return None


def pid_gone(pid: int) -> bool:
    """Gone or a zombie: nothing runs any more."""
    from pytest_qualify.server.lifecycle import pid_exit

    return pid_exit(pid)[0]


def answers_health(port: int) -> bool:
    """A server on this local port answers GET /health with 200."""
    import urllib.request

    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).status == 200
    except OSError:
        return False


def wait_for(predicate, timeout_s: float, poll_s: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return bool(predicate())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
