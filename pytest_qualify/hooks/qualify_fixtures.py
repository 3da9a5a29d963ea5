"""The fixtures a protocol test uses: the profile, the run, the client (failing at once when the
server is gone), this item's cache salt, the recorder of evidence, and ``qualify_ask`` — one
protocol question asked the protocol's way. Registered in every run; without ``--qualify`` a
protocol fixture fails with how to run it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import pytest

from pytest_qualify.hooks import state_of
from pytest_qualify.hooks.server_session import make_client
from pytest_qualify.hooks.watch import fail_if_server_gone
from pytest_qualify.profiles import Profile
from pytest_qualify.run import RunState

if TYPE_CHECKING:
    from pytest_qualify.client.answer import Answer
    from pytest_qualify.client.endpoint import QualifyClient
    from pytest_qualify.graders.contract import Contract
    from pytest_qualify.tasks.sizing import Sizer


def _state(request: pytest.FixtureRequest) -> RunState:
    state = state_of(request.config)
    if state is None:
        pytest.fail("this is a protocol test: run it with --qualify=PROFILE", pytrace=False)
    return state


@pytest.fixture(scope="session")
def qualify_repetition(request: pytest.FixtureRequest) -> int:
    """The repetition this item belongs to (1-based)."""
    return getattr(request, "param", 1)


@pytest.fixture(scope="session")
def qualify_profile(request: pytest.FixtureRequest) -> Profile:
    return _state(request).profile


@pytest.fixture(scope="session")
def qualify_run(request: pytest.FixtureRequest) -> RunState:
    return _state(request)


@pytest.fixture(scope="session")
def _qualify_session_client(request: pytest.FixtureRequest) -> Iterator[QualifyClient]:
    state = _state(request)
    client = make_client(state)
    state.client = client
    if state.base_url and not state.startup_error:
        client.warm_up()
    yield client
    client.close()


@pytest.fixture
def qualify_client(request: pytest.FixtureRequest, _qualify_session_client: QualifyClient) -> QualifyClient:
    """The endpoint's client; fails at once when the server never started or has died."""
    fail_if_server_gone(request.config, _state(request), request.node.nodeid)
    return _qualify_session_client


@pytest.fixture(scope="session")
def _qualify_session_sizer(request: pytest.FixtureRequest, _qualify_session_client: QualifyClient) -> Sizer:
    from pytest_qualify.tasks.sizing import SIZING_FILE, Sizer, tokenizer_identity

    state = _state(request)
    client = _qualify_session_client
    deployment = state.profile.deployment
    identity = tokenizer_identity(client.base_url, client.model, deployment.model, deployment.revision)
    store = state.run_dir / SIZING_FILE if state.run_dir.is_dir() else None
    return Sizer(client.count_chat_tokens, identity, store)


@pytest.fixture
def qualify_sizer(qualify_client: QualifyClient, _qualify_session_sizer: Sizer) -> Sizer:
    """The run's one sizer of prompts in the server's tokens (``tasks/sizing.py``): each distinct
    prompt counted once per run, a finished sizing (a lane, a bracket edge) rebuilt, not searched
    again, by every later item and xdist worker."""
    return _qualify_session_sizer


@pytest.fixture
def qualify_openai(qualify_client: QualifyClient) -> Any:
    """An ``openai.OpenAI`` client (max_retries=0, the profile's request timeout)."""
    return qualify_client.openai


@pytest.fixture
def qualify_http(qualify_client: QualifyClient) -> Any:
    """A raw ``httpx.Client`` on the endpoint, for /health, /tokenize, /metrics, /version."""
    return qualify_client.http


@pytest.fixture
def qualify_salt(request: pytest.FixtureRequest) -> str:
    """A cache salt unique to this item in this run: no request is served from another's cache."""
    return f"{_state(request).run_id}-{uuid.uuid4().hex}"


class Recorder:
    """Adds evidence to the current item's JUnit properties (they survive xdist)."""

    def __init__(self, item: pytest.Item, profile: Profile | None = None) -> None:
        self._item = item
        self._profile = profile

    def props(self, **values: Any) -> None:
        for key, value in values.items():
            self._item.user_properties.append((key, value))

    def answer(self, answer: Answer, tool_turn: bool = False, *, check_finish: bool = True,
               contract: Contract | None = None) -> None:
        """Record an answer's client-observed timing and token counts. An item that makes several
        requests keeps the timing of its first streamed one (client/timing.py). With
        ``check_finish=False`` the caller runs :meth:`finish` itself, after its own grading."""
        from pytest_qualify.client.timing import merge_answer_properties, request_metrics

        metrics = request_metrics(answer.timeline, answer.prompt_tokens, answer.completion_tokens, answer.stream)
        merge_answer_properties(self._item.user_properties, metrics, bool(answer.streamed), answer.cached_tokens)
        # vLLM's own count of the prompt tokens each kind of media cost (--enable-prompt-tokens-details).
        media = (answer.usage.get("prompt_tokens_details") or {}).get("multimodal_tokens") or {}
        self.props(**{f"{kind}_prompt_tokens": int(n) for kind, n in sorted(media.items()) if n is not None})
        if check_finish:
            self.finish(answer, tool_turn, contract=contract)

    def retime(self) -> None:
        """Let the item's next answer be its timing: the answers so far were to a prompt it discarded
        (a computed lane size its answer refuted)."""
        from pytest_qualify.client.timing import PRIMARY_KEYS

        self._item.user_properties[:] = [(k, v) for k, v in self._item.user_properties if k not in PRIMARY_KEYS]

    def finish(self, answer: Answer, tool_turn: bool = False, *, contract: Contract | None = None) -> None:
        """The checks every recorded answer goes through (``graders/answer_checks.py``, one pure
        function): records what they found (``finish_reason``, ``finish_check``, ``stream_check``,
        ``length_chars``, ``length_measured``) and fails the test on the first failure. ``tool_turn``:
        the turn offered tools, so ``tool_calls`` may end it; ``contract``: the answer contract the
        module grades the answer under (the length band measures what it reads, and applies only
        when it is named)."""
        from pytest_qualify.graders.answer_checks import FINISH_PROPERTIES, check_answer
        from pytest_qualify.run import module_of

        module = module_of(self._item)
        band = self._profile.integrity.band(module) if self._profile is not None and module else None
        required = self._profile is not None and self._profile.integrity.incremental_streaming == "required"
        checks = check_answer(answer, tool_turn=tool_turn, band=band, contract=contract, incremental_required=required)
        # One finish pair per item: a failing check fails the test at once, so "ok" means every answer so far.
        props = self._item.user_properties
        props[:] = [(k, v) for k, v in props if k not in FINISH_PROPERTIES]
        props.extend(checks.properties)
        if checks.failure is not None:
            pytest.fail(checks.failure, pytrace=False)


@pytest.fixture
def qualify_record(request: pytest.FixtureRequest) -> Recorder:
    state = state_of(request.config)
    return Recorder(request.node, state.profile if state is not None else None)


class Ask(Protocol):
    def __call__(self, prompt: str | list[dict[str, Any]], *, tool_turn: bool = False, salt_suffix: str = "",
                 grade: Callable[[Answer], None] | None = None, check_finish: bool = True,
                 journal_role: str = "answer", contract: Contract | None = None,
                 marks: Mapping[str, str] | None = None, **params: Any) -> Answer: ...

    # The answer journal's key of a request asked this way (evidence/answers.py).
    key: Callable[..., str]


@pytest.fixture
def qualify_ask(request: pytest.FixtureRequest, qualify_client: QualifyClient, qualify_profile: Profile,
                qualify_record: Recorder, qualify_salt: str) -> Ask:
    """One protocol question, asked the protocol's way: the profile's answer budget
    (``limits.answer_budget_tokens``), temperature 0, a fixed seed, this item's cache salt; the
    answer is recorded (and its finish state checked). ``params`` override or add request fields.

    ``ask(prompt_or_messages, *, tool_turn=False, salt_suffix="", grade=None, **params) -> Answer``

    ``grade``: the module's own check of the answer, run before the shared finish-state check, so
    that a module whose subject is the failure (a reasoning leak that used up the budget) reports
    its own reason rather than the finish state it caused. ``check_finish=False``: no finish-state
    or contract check at all (the integrity module compares answers whatever their finish state).
    ``contract``: the answer contract the module grades the answer under; given, the profile's
    length band for the module applies to what that contract reads (``graders/answer_checks.py``).

    Every answer is also kept in the run's answer journal (evidence/answers.py), keyed by its
    request and saying its role (``journal_role``, one of ``answers.ROLES``: the integrity
    module's held samples and re-asks, the context module's timed answers), for the integrity
    module's comparison of answers to the same request; and with its request in the run's
    transcripts (evidence/transcripts.py, what report.html shows), in one call per answer
    (``answers.record``); the slots a contract read travel on its verdict and are kept when the
    verdict is (``checks.require``). ``marks``: strings whose place in a long prompt the
    transcript states (a lane's needles), never sent.
    """

    def protocol_request(prompt: str | list[dict[str, Any]], salt_suffix: str,
                         params: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        request = {"max_tokens": qualify_profile.limits.answer_budget_tokens, "temperature": 0, "seed": 1,
                   "cache_salt": qualify_salt + salt_suffix, **params}
        return messages, request

    def key(prompt: str | list[dict[str, Any]], **params: Any) -> str:
        from pytest_qualify.evidence import answers

        return answers.request_key(*protocol_request(prompt, "", params))

    def ask(prompt: str | list[dict[str, Any]], *, tool_turn: bool = False, salt_suffix: str = "",
            grade: Callable[[Answer], None] | None = None, check_finish: bool = True, journal_role: str = "answer",
            contract: Contract | None = None, marks: Mapping[str, str] | None = None, **params: Any) -> Answer:
        from pytest_qualify.evidence import answers, transcripts
        from pytest_qualify.graders.integrity import RecordedAnswer, parsed_calls

        # The client's own limit, not a request field: kept out of the request, its key and its record.
        idle = params.pop("stream_idle_s", None)
        messages, request = protocol_request(prompt, salt_suffix, params)
        key = answers.request_key(messages, request)
        sent = {"model": getattr(qualify_client, "model", None), **request}
        try:
            answer = qualify_client.chat(messages, **request, **({"stream_idle_s": idle} if idle else {}))
        except Exception as exc:  # the request stays in the story; the failure is the test's to report
            if run is not None:
                answers.record(run.run_dir, transcripts.asked_record(
                    nodeid, key, messages, sent, error=f"{type(exc).__name__}: {exc}", marks=marks), None,
                    secrets=run.secrets)
            raise
        if run is not None:  # a run's journal and transcripts; a test that fakes the client has none
            answers.record(run.run_dir, transcripts.asked_record(nodeid, key, messages, sent, answer, marks=marks),
                           RecordedAnswer(asker, answer.streamed, answer.content, parsed_calls(answer.tool_calls),
                                          answer.finish_reason),
                           salt=request.get("cache_salt"), role=journal_role, secrets=run.secrets)
        if not check_finish:
            qualify_record.answer(answer, tool_turn=tool_turn, check_finish=False)
            return answer
        qualify_record.answer(answer, tool_turn=tool_turn, check_finish=grade is None, contract=contract)
        if grade is not None:
            grade(answer)
            qualify_record.finish(answer, tool_turn, contract=contract)
        return answer

    ask.key = key  # type: ignore[attr-defined]
    nodeid = request.node.nodeid
    asker = nodeid.split("::", 1)[-1]
    run = state_of(request.config)
    return ask
