"""Case generation and shared fixtures of the conformance suite (matrix.py holds the matrix)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rtp_ref.cases.checks import spec as check_spec
from rtp_ref.cases.domain import DOMAIN_KIND
from rtp_ref.cases.input_checks import BAD_INPUT_KIND, HARDENING_KINDS
from rtp_ref.certify.calls import DEVICE_FAULT
from rtp_ref.certify.collector import json_safe, write_case_index
from rtp_ref.certify.faults import FaultLog
from rtp_ref.certify.graph_cases import DECLINED, GraphSpec, graph_claim, graph_ops, graph_specs
from rtp_ref.certify.large_cases import LargeSpec, large_ops, large_specs
from rtp_ref.certify.quarantine import quarantine_reason
from rtp_ref.certify.stream_cases import StreamSpec, scenario_device, stream_ops, stream_specs
from rtp_ref.certify.tiers import declined_reason, runs_tier
from rtp_ref.certify.verdict import UNDEFINED, XFAILED, Judgement, matching_deviation
from rtp_ref.ops import INDEXER_GATHER_OP, INDEXER_OP, MLA_GATHER_OP, MLA_OP, OPS, op_spec

from .matrix import KernelUnderTest, suite


def _skip_marks(k: KernelUnderTest) -> list[pytest.MarkDecorator]:
    return [pytest.mark.skip(reason=k.skip_reason)] if k.skip_reason else []


def _runs(config: pytest.Config, tier: str) -> bool:
    """Whether this session runs ``tier``'s cases (``--rtp-tier``: regular, large or all)."""
    return runs_tier(str(config.getoption("rtp_tier")), tier)


@dataclass(frozen=True)
class CaseParam:
    """One regular case of any op: the bound kernel, the case's key (from its op's cases: rtp_ref/ops), and the
    platform's known deviation covering it (an index, or None)."""

    kut: KernelUnderTest
    key: Any
    deviation: int | None


def case_params(config: pytest.Config) -> list[Any]:
    """Every (kernel, variant, case) of every op this session certifies (the regular tier)."""
    s = suite(config)
    if not _runs(config, "regular"):
        return []
    params: list[Any] = []
    for op in OPS:
        for k in s.kernels_of(op):
            for variant in s.layouts_by_op[op]:
                if variant not in k.claims:
                    continue
                for key in op_spec(op).cases.keys(variant, k.device):
                    deviation = matching_deviation(s.platform, k.name, k.device, key)
                    params.append(pytest.param(CaseParam(k, key, deviation), marks=_skip_marks(k),
                                               id=f"{k.name}-{variant}-{key.case_id}"))
    return params


@dataclass(frozen=True)
class LargeCaseParam:
    """One large-address case: the bound kernel and the case spec (its op and layout)."""

    kut: KernelUnderTest
    spec: LargeSpec


def large_case_params(config: pytest.Config) -> list[Any]:
    """With ``--rtp-tier large`` or ``all``: one case per (kernel, claimed layout) of every op, marked ``large``."""
    s = suite(config)
    if not _runs(config, "large"):
        return []
    return [pytest.param(LargeCaseParam(k, spec), marks=[*_skip_marks(k), pytest.mark.large],
                         id=f"{k.name}-{layout}-large")
            for op in large_ops() for k in s.kernels_of(op) for layout in s.layouts_by_op[op] if layout in k.claims
            for spec in large_specs(op, layout)]


@dataclass(frozen=True)
class GraphCaseParam:
    """One CUDA-graph case: the bound kernel and the case spec (its op, layout and scenario)."""

    kut: KernelUnderTest
    spec: GraphSpec


def _graph_marks(k: KernelUnderTest) -> list[pytest.MarkDecorator]:
    if k.skip_reason:
        return _skip_marks(k)
    if k.device != "cuda":
        why = f"graph tier: CUDA graphs need a CUDA device; {k.name} runs on {k.device} here"
        return [pytest.mark.skip(reason=why)]
    if graph_claim(k.kernel) == DECLINED:
        return [pytest.mark.skip(reason=declined_reason(k.name))]
    return []


def graph_case_params(config: pytest.Config) -> list[Any]:
    """With ``--rtp-tier graph`` or ``all``: each scenario of each (kernel, claimed layout) of every op."""
    s = suite(config)
    if not _runs(config, "graph"):
        return []
    return [pytest.param(GraphCaseParam(k, spec), marks=_graph_marks(k), id=f"{k.name}-{layout}-{spec.case_id}")
            for op in graph_ops() for k in s.kernels_of(op) for layout in s.layouts_by_op[op] if layout in k.claims
            for spec in graph_specs(op, layout)]


@dataclass(frozen=True)
class StreamCaseParam:
    """One stream-tier case: the bound kernel, the case spec (its op, layout, scenario and regular case key) and
    the platform's known deviation covering that key (an index, or None)."""

    kut: KernelUnderTest
    spec: StreamSpec
    deviation: int | None


def _stream_marks(k: KernelUnderTest, spec: StreamSpec) -> list[pytest.MarkDecorator]:
    if k.skip_reason:
        return _skip_marks(k)
    if k.device != "cuda":
        return [pytest.mark.skip(reason=f"stream tier: streams need a CUDA device; {k.name} runs on {k.device} here")]
    if scenario_device(spec) is None:
        return [pytest.mark.skip(reason="stream tier: the other-device case needs two GPUs; torch sees one here")]
    return []


def stream_case_params(config: pytest.Config) -> list[Any]:
    """With ``--rtp-tier stream`` or ``all``: each scenario of each (kernel, claimed layout) of every write op."""
    s = suite(config)
    if not _runs(config, "stream"):
        return []
    return [pytest.param(StreamCaseParam(k, spec, matching_deviation(s.platform, k.name, k.device, spec.key)),
                         marks=_stream_marks(k, spec), id=f"{k.name}-{layout}-{spec.case_id}")
            for op in stream_ops() for k in s.kernels_of(op) for layout in s.layouts_by_op[op] if layout in k.claims
            for spec in stream_specs(op, layout)]


def _claimed_pairs(config: pytest.Config, slotted: bool) -> list[Any]:
    """(kernel, variant) pairs under test of every op (the determinism case), or of the ops that write through a
    slot mapping (``slotted``: the out-of-range-slot case)."""
    s = suite(config)
    if not _runs(config, "regular"):
        return []
    return [pytest.param((k, v), marks=_skip_marks(k), id=f"{k.name}-{v}") for op in OPS for k in s.kernels_of(op)
            for v in s.layouts_by_op[op] if v in k.claims and (not slotted or op_spec(op).cases.past_capacity)]


def _domain_pairs(config: pytest.Config) -> list[Any]:
    """(kernel, variant) pairs under test of every kernel that declares an input domain (``input_domain`` or
    ``input_requirements``: rtp_ref.kernels.protocol)."""
    s = suite(config)
    if not _runs(config, "regular"):
        return []
    return [pytest.param((k, v), marks=_skip_marks(k), id=f"{k.name}-{v}") for op in OPS for k in s.kernels_of(op)
            for v in s.layouts_by_op[op] if v in k.claims
            and (hasattr(k.kernel, "input_domain") or getattr(k.kernel, "input_requirements", ()))]


def _unclaimed_pairs(config: pytest.Config) -> list[Any]:
    """(kernel, variant) for every variant of its op a kernel does not claim, where the op's call names the variant
    (a kernel can refuse only a variant it is told)."""
    s = suite(config)
    if not _runs(config, "regular"):
        return []
    return [pytest.param((k, v), marks=_skip_marks(k), id=f"{k.name}-{v}") for op in OPS for k in s.kernels_of(op)
            for v in OPS[op].variants if v not in k.claims and op_spec(op).cases.names_variant]


@dataclass(frozen=True)
class RoundTripParam:
    """A writer -> reader round trip: the reader under test, the writer of its cache (None: the reference writer)
    and the variant."""

    kut: KernelUnderTest
    writer: KernelUnderTest | None
    layout: str

    @property
    def writer_name(self) -> str:
        """The writer's name (``reference`` for the reference writer)."""
        return self.writer.name if self.writer is not None else "reference"


#: each read op and the write op whose caches it reads
READS_FROM = {MLA_GATHER_OP: MLA_OP, INDEXER_GATHER_OP: INDEXER_OP}
#: the built-in references of the write ops (the round trips' own reference writer stands for them)
REFERENCE_WRITERS = ("reference", "reference-indexer")


def round_trip_params(config: pytest.Config) -> list[Any]:
    """Each reader under test with the reference writer and with every writer of the session (of the op whose
    caches it reads) that claims the variant and runs on the reader's device."""
    s = suite(config)
    if not _runs(config, "regular"):
        return []
    params: list[Any] = []
    for op, write_op in READS_FROM.items():
        for k in s.kernels_of(op):
            for variant in s.layouts_by_op[op]:
                if variant not in k.claims:
                    continue
                writers = [None, *(w for w in s.kernels_of(write_op) if variant in w.claims
                                   and w.device == k.device and w.name not in REFERENCE_WRITERS)]
                for w in writers:
                    marks = _skip_marks(k) or (_skip_marks(w) if w is not None else [])
                    param = RoundTripParam(k, w, variant)
                    params.append(pytest.param(param, marks=marks, id=f"{k.name}-{variant}-from-{param.writer_name}"))
    return params


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        metafunc.parametrize("case", case_params(metafunc.config))
    if "round_trip" in metafunc.fixturenames:
        metafunc.parametrize("round_trip", round_trip_params(metafunc.config))
    if "large_case" in metafunc.fixturenames:
        metafunc.parametrize("large_case", large_case_params(metafunc.config))
    if "graph_case" in metafunc.fixturenames:
        metafunc.parametrize("graph_case", graph_case_params(metafunc.config))
    if "stream_case" in metafunc.fixturenames:
        metafunc.parametrize("stream_case", stream_case_params(metafunc.config))
    if "claimed_pair" in metafunc.fixturenames:
        metafunc.parametrize("claimed_pair", _claimed_pairs(metafunc.config, slotted=False))
    if "slotted_pair" in metafunc.fixturenames:
        metafunc.parametrize("slotted_pair", _claimed_pairs(metafunc.config, slotted=True))
    if "unclaimed_pair" in metafunc.fixturenames:
        metafunc.parametrize("unclaimed_pair", _unclaimed_pairs(metafunc.config))
    if "domain_pair" in metafunc.fixturenames:
        metafunc.parametrize("domain_pair", _domain_pairs(metafunc.config))


#: the case kind of each per-pair test of test_support_matrix.py (what its case record says)
PAIR_TEST_KINDS = {"test_out_of_range_slot": BAD_INPUT_KIND, "test_deterministic": "determinism",
                   "test_declared_domain": DOMAIN_KIND}


def _case_identity(item: pytest.Item) -> dict[str, Any] | None:
    """The kernel, layout and kind of a collected case (None for the suite's own sanity test)."""
    params = getattr(item, "callspec", None)
    case = params.params.get("case") if params else None
    pair = (params.params.get("claimed_pair") or params.params.get("slotted_pair")
            or params.params.get("unclaimed_pair") or params.params.get("domain_pair")) if params else None
    if isinstance(case, CaseParam):
        return {"kernel": case.kut.name, "layout": case.key.layout, "kind": case.key.kind, "case": case.key.case_id,
                "execution": case.kut.execution, "op": case.kut.op}
    large = params.params.get("large_case") if params else None
    if isinstance(large, LargeCaseParam):
        return {"kernel": large.kut.name, "layout": large.spec.layout, "kind": large.spec.kind,
                "case": large.spec.case_id, "execution": large.kut.execution, "op": large.spec.op, "tier": "large"}
    graph = params.params.get("graph_case") if params else None
    if isinstance(graph, GraphCaseParam):
        return {"kernel": graph.kut.name, "layout": graph.spec.layout, "kind": graph.spec.kind,
                "case": graph.spec.case_id, "execution": graph.kut.execution, "op": graph.spec.op, "tier": "graph"}
    stream = params.params.get("stream_case") if params else None
    if isinstance(stream, StreamCaseParam):
        return {"kernel": stream.kut.name, "layout": stream.spec.layout, "kind": stream.spec.key.kind,
                "case": stream.spec.case_id, "execution": stream.kut.execution, "op": stream.spec.op,
                "tier": "stream"}
    trip = params.params.get("round_trip") if params else None
    if isinstance(trip, RoundTripParam):
        return {"kernel": trip.kut.name, "layout": trip.layout, "kind": "round_trip",
                "case": f"round_trip-from-{trip.writer_name}", "execution": trip.kut.execution, "op": trip.kut.op}
    if isinstance(pair, tuple) and params is not None:
        unclaimed = "unclaimed_pair" in params.params
        kind = "unclaimed" if unclaimed else PAIR_TEST_KINDS[getattr(item, "originalname", "")]
        return {"kernel": pair[0].name, "layout": pair[1], "kind": kind, "execution": pair[0].execution,
                "op": pair[0].op}
    return None


#: how pytest's skip mark of a test with an empty parameter set begins (its ``empty_parameter_set_mark``)
EMPTY_PARAMETER_SET = "got empty parameter set"


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: the index holds exactly the cases that will run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Drop each test whose parameter set is empty (the support-matrix checks when every kernel claims every
    layout, an op none of the selected kernels writes): nothing to check there, and pytest would show it as
    a skipped case, a row of its own in the report; with ``--rtp-report``, index the collected cases so a
    crashed or never-run case keeps its identity. A run left with no case at all still fails (0 cases)."""
    empty = [i for i in items if any(str(m.kwargs.get("reason", "")).startswith(EMPTY_PARAMETER_SET)
                                     for m in i.iter_markers("skip"))]
    if empty:
        config.hook.pytest_deselected(items=empty)
        items[:] = [i for i in items if i not in empty]
    out = config.getoption("rtp_report")
    if not out:
        return
    index = {item.nodeid: identity for item in items if (identity := _case_identity(item)) is not None}
    write_case_index(Path(out), index)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> None:
    """A case of a quarantined pair (its kernel crashed or hung ``--rtp-crash-limit`` times on that
    layout) fails at once, without calling the kernel."""
    out = pyfuncitem.config.getoption("rtp_report")
    identity = _case_identity(pyfuncitem) if out else None
    # hardening is reported in columns of its own: it runs whatever the write did; the declared domain calls nothing
    if not out or identity is None or identity["kind"] in (*HARDENING_KINDS, DOMAIN_KIND):
        return
    reason = quarantine_reason(Path(out), identity["kernel"], identity["layout"])
    if reason:
        record = json.dumps({**identity, "failed_checks": ["support.not_run"]})
        pyfuncitem.user_properties.append(("rtp_ref_case", record))
        pytest.fail(reason, pytrace=False)


_FAULT_LOG = pytest.StashKey[FaultLog]()


def pytest_configure(config: pytest.Config) -> None:
    from rtp_ref.pytest_plugin import activate

    activate(config)  # rtp-ref's own suite: the plugin is inert in every other project
    out = config.getoption("rtp_report")
    if out:
        config.stash[_FAULT_LOG] = FaultLog(Path(out))


@pytest.hookimpl(tryfirst=True)
def pytest_collection(session: pytest.Session) -> None:
    log = session.config.stash.get(_FAULT_LOG, None)
    if log is not None:
        log.collecting()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    log = item.config.stash.get(_FAULT_LOG, None)
    if log is not None:
        log.case(item.nodeid)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's hook: our timer records TIMEOUT in the fault log before ending the worker."""
    log = item.config.stash.get(_FAULT_LOG, None)
    if log is None or not settings.timeout or settings.timeout <= 0:
        return None
    log.start_timer(settings.timeout, lambda: os._exit(1))
    return True


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_timeout_cancel_timer(item: pytest.Item) -> bool | None:
    log = item.config.stash.get(_FAULT_LOG, None)
    if log is None:
        return None
    log.cancel_timer()
    return True


@pytest.fixture(autouse=True)
def _replace_worker_after_device_fault(pytestconfig: pytest.Config) -> Iterator[None]:
    """After a case that killed the CUDA context, no later case in this process can be trusted.

    Under xdist (how ``rtp-ref certify`` runs) the worker exits once the case's report is out
    and xdist starts a fresh one; in a plain pytest run the session stops, marked incomplete.
    """
    yield
    if DEVICE_FAULT:
        if os.environ.get("PYTEST_XDIST_WORKER"):
            log = pytestconfig.stash.get(_FAULT_LOG, None)
            if log is not None:
                log.fatal("DEVICE_FAULT", f"{DEVICE_FAULT[0]} left the CUDA context unusable")
            os._exit(70)
        pytest.exit(f"device fault: {DEVICE_FAULT[0]} left the CUDA context unusable; stopping the run",
                    returncode=pytest.ExitCode.INTERRUPTED)


def show(judgement: Judgement) -> None:
    """End a test as the engine judged its case: a failure (a stale deviation too) fails it, a known deviation is
    an xfail; a pass or a declared refusal returns."""
    if judgement.failed:
        pytest.fail(judgement.message, pytrace=False)
    if judgement.outcome == XFAILED:
        pytest.xfail(judgement.message)
    if judgement.outcome == UNDEFINED:
        pytest.skip(judgement.message)


@pytest.fixture
def record_case(record_property: Callable[[str, object], None]) -> Callable[..., None]:
    """Attach a case record (kernel, layout, grade, checks...) for the report collector."""

    def record(**fields: Any) -> None:
        fields = {"op": MLA_OP, **fields}  # every record names its op; the MLA write's tests leave it implied
        for name in fields.get("failed_checks", []):
            check_spec(name)  # a name not in rtp_ref.cases.checks.CHECKS is the suite's error, caught here
        record_property("rtp_ref_case", json.dumps(json_safe(fields)))

    return record
