"""The plugin's own tests, one folder per room of ``pytest_qualify/`` (graders, gate, evidence,
server, client, tasks, reference, promotion; plugin: the pytest side on top; suites: the protocol
modules end to end; engine: real vLLM; project: the repository as a whole). Each folder is a
package, so the test files import their shared helpers relatively (``from ..helpers import
write_profile``, ``from ..fake_vllm import fake_command``) under every ``--import-mode``,
``importlib`` included.

Two tiers: ``pytest -m "not e2e and not real_vllm"`` is the fast loop (the in-process tests);
marker ``e2e`` is every test that runs an inner pytest (:func:`tests.helpers.run_pytest` and its
siblings, the one way to start one) or installs the wheel; marker ``real_vllm`` starts real vLLM."""
