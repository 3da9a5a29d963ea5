"""server/info.py: what the server says it is and the first step's stop, handed to xdist workers as
JSON, and the first step judged from it without pytest."""

from __future__ import annotations

import json
from dataclasses import replace

from pytest_qualify.client.errors import AuthRejected, ErrorKind
from pytest_qualify.hooks.xdist import adopt_handover, write_handover
from pytest_qualify.profiles import load_profile
from pytest_qualify.run import RunState
from pytest_qualify.server.info import ServerInfo, Stop, first_step, read_server_info
from pytest_qualify.settings import Mode, Settings


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
    assert stop == Stop("not judged: the endpoint rejected the API key (the key is read from $K): HTTP 401 on GET "
                        "/v1/models", judged=False, keeps=()) and declared is None
    html = read_server_info(Client({"version": "x"}, ValueError("Expecting value")), Mode.ATTACH, None)
    stop, _ = first_step(html, profile, mode=Mode.ATTACH, startup_error=None, api_key_env="K")
    assert stop is not None and stop.reason.startswith("not judged: not an OpenAI-compatible endpoint")
    assert not stop.judged and stop.keeps == ()


def test_a_served_model_that_is_not_the_profiles_stops_judged_keeping_the_smoke_module():
    profile = load_profile("small")
    other = read_server_info(Client({"version": "0.32.0"}, {"data": [{"id": "someone-else", "max_model_len": 8}]}),
                             Mode.ATTACH, None)
    stop, declared = first_step(other, profile, mode=Mode.ATTACH, startup_error=None, api_key_env="K")
    assert stop is not None and stop.judged and stop.keeps == ("smoke",) and declared is not None
    assert stop.reason.startswith("the served identity is not the profile's (stopped after the smoke module): ")


def _state(tmp_path, *, is_worker: bool) -> RunState:
    settings = Settings(profile="small", repeat=1, endpoint="http://127.0.0.1:1", api_key_env="K",
                        evidence_dir=tmp_path, serve_command=None, startup_timeout_s=None)
    return RunState(settings, load_profile("small"), "20260101T000000Z-abcdef", tmp_path, is_worker=is_worker)


def test_a_worker_adopts_the_controllers_reading_and_stop_typed(tmp_path):
    controller = _state(tmp_path, is_worker=False)
    controller.base_url = "http://127.0.0.1:1"
    info = read_server_info(Client({"version": "0.32.0"}, {"data": [{"id": "m", "simulated": True}]}),
                            Mode.ATTACH, None)
    controller.server_info = replace(info, server_pid=4242, server_log="/tmp/server.log")
    controller.stop = Stop("the served identity is not the profile's", judged=True, keeps=("smoke",))
    write_handover(controller)
    worker = _state(tmp_path, is_worker=True)
    adopt_handover(worker)
    assert worker.server_info == controller.server_info and worker.stop == controller.stop
    assert worker.simulated and worker.server_info.server_pid == 4242 and worker.stop.keeps == ("smoke",)


def test_a_run_that_never_reached_a_server_hands_over_no_reading_and_no_stop(tmp_path):
    controller = _state(tmp_path, is_worker=False)
    controller.startup_error = "connection refused"
    write_handover(controller)
    worker = _state(tmp_path, is_worker=True)
    adopt_handover(worker)
    assert (worker.server_info, worker.stop, worker.startup_error) == (None, None, "connection refused")
    assert not worker.simulated
