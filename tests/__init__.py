"""The plugin's own tests. A package, so the test files import their shared helpers relatively
(``from .helpers import write_profile``, ``from .fake_vllm import fake_command``) under every
``--import-mode``, ``importlib`` included."""
