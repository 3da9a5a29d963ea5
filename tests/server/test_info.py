"""server/info.py: what the server says it is, handed to xdist workers as JSON, and the first step
judged from it without pytest."""

from __future__ import annotations

import json

from pytest_qualify.client.errors import AuthRejected, ErrorKind
from pytest_qualify.profiles import load_profile
from pytest_qualify.server.info import ServerInfo, first_step, read_server_info
from pytest_qualify.settings import Mode


class Client:
    def __init__(self, version: object, models: object) -> None:
        self.answers = {"/version": version, "/v1/models": models}

    def get_json(self, path: str) -> object:
        answer = self.answers[path]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def chat(self, *args: object, **kwargs: object) -> None:
        return None


def test_the_facts_survive_the_json_hand_over_with_their_kinds():
    info = read_server_info(Client({"version": "0.32.0"}, AuthRejected("GET /v1/models", "no", "K")), Mode.ATTACH, None)
    assert info.models_error_kind is ErrorKind.AUTH_REJECTED and info.models_status == 401
    handed = json.loads(json.dumps(info.as_dict()))
    assert "chat_status" not in handed and handed["models_error_kind"] == "auth_rejected"
    assert ServerInfo.of(handed) == info


def test_the_first_step_stops_a_rejected_key_not_judged_and_goes_on_for_the_profiles_model():
    profile = load_profile("small")
    rejected = read_server_info(Client({"version": "x"}, AuthRejected("GET /v1/models", "no", "K")), Mode.ATTACH, None)
    stop, declared = first_step(rejected, profile, mode=Mode.ATTACH, startup_error=None, api_key_env="K")
    assert stop == ("not judged: the endpoint rejected the API key (the key is read from $K): HTTP 401 on GET "
                    "/v1/models", False, ()) and declared is None
    html = read_server_info(Client({"version": "x"}, ValueError("Expecting value")), Mode.ATTACH, None)
    stop, _ = first_step(html, profile, mode=Mode.ATTACH, startup_error=None, api_key_env="K")
    assert stop is not None and stop[0].startswith("not judged: not an OpenAI-compatible endpoint")
