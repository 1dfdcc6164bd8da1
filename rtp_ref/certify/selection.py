"""Whether a certify selection (platform tables, kernels, ``--layout``, ``--tier``) leaves anything to certify on
this machine, decided before a run starts.

The rules are the suite's (conformance/matrix.py and conftest.py, which skip or leave out the cases): a kernel
runs on the device ``device_to_run`` picks for the table (the CPU for the cpu table when the kernel claims it, else
a GPU torch sees); a kernel without ``bind(contract)`` follows no table but its own, so it runs only where the
table is native (rtp_ref.certify.session.execution_mode); a case exists for each layout a runnable kernel claims
among the layouts under test of its op (``--layout`` where the table supports it, else every layout the table
supports); the large and graph tiers have cases of the ops with tier hooks (``OpCases.large`` and ``graph``),
the graph tier only on a CUDA device and not for a kernel that declares ``graph_safe = False``, the stream tier
of the write ops on a CUDA device. A selection that
leaves no case is the user's mistake: ``rtp-ref certify`` refuses it with one line (``selection_problem``) instead
of running a suite whose every case is skipped and whose only finding is that nothing ran; ``--platform all``
leaves out the tables where it leaves none (``idle_reason``).

With several kernels, tables or layouts, the selection is refused only when NONE of them leaves a case: a kernel
that cannot run on one table may be the one certified on another, and the suite reports the skipped ones.
The one exception is a ``--layout`` no selected kernel claims at all: it can never add a case, so it is named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rtp_ref.certify.graph_cases import DECLINED, graph_claim, graph_ops
from rtp_ref.certify.large_cases import large_ops
from rtp_ref.certify.session import execution_mode
from rtp_ref.certify.stream_cases import stream_ops
from rtp_ref.certify.tiers import runs_tier
from rtp_ref.kernels.protocol import device_to_run
from rtp_ref.ops import claimed_variants, every_variant, op_name, supported_variants
from rtp_ref.platform import Platform, platform_names, resolve_platform


@dataclass(frozen=True)
class Pair:
    """A kernel and a layout it claims, certified against a platform table, and the device the kernel runs on."""

    platform: str
    kernel: str
    layout: str
    op: str
    device: str


def run_device(kernel: Any, platform: Platform) -> str | None:
    """The device type ``kernel`` runs on when certified against ``platform`` here (None: torch sees none of the
    devices it claims)."""
    return device_to_run(kernel.devices, prefer_gpu=platform.backend != "cpu")


#: why a kernel without ``bind(contract)`` cannot be certified against an emulated table (``blocker``)
NO_BIND = "it has no bind(contract), so it cannot follow an emulated table's contract"
#: where the vendor guide says what ``bind(contract)`` is (the fix the refusal of such a kernel names)
BIND_GUIDE = "docs/vendor-guide.md#bind-certifying-against-another-platforms-table"


def blocker(kernel: Any, platform: Platform) -> str | None:
    """Why ``kernel`` cannot be certified against ``platform`` on this machine, or None when it can."""
    device = run_device(kernel, platform)
    if device is None:
        return f"it runs on {', '.join(kernel.devices)} only, and torch sees no such device here"
    if getattr(kernel, "bind", None) is None and execution_mode(platform, device) == "emulated":
        return NO_BIND
    return None


def layouts_under_test(platform: Platform, op: str, wanted: Sequence[str]) -> list[str]:
    """The variants of ``op`` a run against ``platform`` certifies: ``wanted`` (``--layout``) where the table
    supports them, else every one it supports."""
    supported = supported_variants(platform, op)
    return [name for name in wanted if name in supported] if wanted else list(supported)


def _in_tier(pair: Pair, kernel: Any, tier: str) -> bool:
    """Whether ``--tier tier`` has a case of ``pair`` (of ``kernel``) that is not skipped."""
    if runs_tier(tier, "regular"):
        return True
    if runs_tier(tier, "large"):
        return pair.op in large_ops()
    if runs_tier(tier, "stream"):
        return pair.op in stream_ops() and pair.device == "cuda"
    return pair.op in graph_ops() and pair.device == "cuda" and graph_claim(kernel) != DECLINED


def pairs(kernels: Mapping[str, Any], platform: Platform, wanted: Sequence[str], tier: str) -> list[Pair]:
    """Every (kernel, layout) of ``kernels`` (name -> kernel) a run against ``platform`` certifies with a case of
    ``tier`` that is not skipped."""
    found = []
    for name, kernel in kernels.items():
        device = run_device(kernel, platform)
        if device is None or blocker(kernel, platform):
            continue
        op = op_name(kernel)
        for layout in layouts_under_test(platform, op, wanted):
            pair = Pair(platform.name, name, layout, op, device)
            if layout in claimed_variants(kernel) and _in_tier(pair, kernel, tier):
                found.append(pair)
    return found


def idle_reason(kernels: Mapping[str, Any], platform: Platform, wanted: Sequence[str], tier: str) -> str | None:
    """Why a run against ``platform`` would certify nothing (``--platform all`` leaves the table out), or None."""
    if pairs(kernels, platform, wanted, tier):
        return None
    if wanted and not set(wanted) & set(every_variant(platform)):
        return f"it supports none of --layout {', '.join(wanted)}"
    if all(blocker(kernel, platform) for kernel in kernels.values()):
        return "no selected kernel can run against it here"
    if not pairs(kernels, platform, wanted, "regular"):
        return "the selected kernels that can run against it here claim none of its layouts under test"
    return f"--tier {tier} has no case of the selected kernels there"


def selection_problem(selected: Mapping[str, Any], discovered: Mapping[str, Any], explicit: bool,
                      platforms: Sequence[Platform], wanted: Sequence[str], tier: str) -> str | None:
    """The one-line error (argument, value, what is valid) of a selection that leaves nothing to certify on any
    of ``platforms`` here, or None when it leaves something.

    ``selected``: the kernels of the run (name -> kernel); ``explicit``: whether ``--kernel`` chose them (else
    they are every discovered kernel); ``discovered``: every kernel found, for what is valid; ``wanted``:
    ``--layout``; ``tier``: ``--tier``. The causes are checked in this order: a ``--layout`` no selected kernel
    claims; no selected kernel can run against any of the tables here; the ones that can claim none of the
    layouts under test; the tier has no case of what is left.
    """
    run = _Selection(selected, discovered, explicit, platforms, wanted, tier)
    for layout in wanted:
        if not any(layout in claimed_variants(kernel) for kernel in selected.values()):
            return run.unclaimed(layout)
    if not run.runnable():
        return run.unrunnable()
    if not any(pairs(selected, platform, wanted, "regular") for platform in platforms):
        return run.nothing_claimed_under_test()
    if not any(pairs(selected, platform, wanted, tier) for platform in platforms):
        return run.empty_tier()
    return None


def _names(names: Iterable[str]) -> str:
    return ", ".join(names)


@dataclass(frozen=True)
class _Selection:
    """A selection that leaves nothing to certify, and the error line of each reason why (selection_problem)."""

    selected: Mapping[str, Any]
    discovered: Mapping[str, Any]
    explicit: bool
    platforms: Sequence[Platform]
    wanted: Sequence[str]
    tier: str

    @property
    def kernels(self) -> str:
        """``--kernel`` with the values it was given, as an error line names them (``--kernel 'a', 'b'``)."""
        if not self.explicit:
            return "every discovered kernel"
        return f"--kernel {', '.join(map(repr, self.selected))}"

    @property
    def where(self) -> str:
        """The tables, as an error line names them."""
        return f"platform {self.platforms[0].name}" if len(self.platforms) == 1 else "any bundled platform"

    @property
    def they(self) -> str:
        """The pronoun of the selected kernels."""
        return "they" if len(self.selected) > 1 else "it"

    def runnable(self, kernels: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The kernels (default: the selected ones) that can run against one of the tables here."""
        return {name: kernel for name, kernel in (self.selected if kernels is None else kernels).items()
                if any(blocker(kernel, platform) is None for platform in self.platforms)}

    def claimable(self, kernels: Mapping[str, Any]) -> list[str]:
        """The layouts ``kernels`` claim that one of the tables supports, in the tables' order."""
        claimed = {layout for kernel in kernels.values() for layout in claimed_variants(kernel)}
        return [layout for layout in dict.fromkeys(v for p in self.platforms for v in every_variant(p))
                if layout in claimed]

    def unclaimed(self, layout: str) -> str:
        """``--layout layout`` is claimed by no selected kernel."""
        claimable = _names(self.claimable(self.selected)) or "none"
        valid = f"a layout {self.they} claim{'' if len(self.selected) > 1 else 's'} ({claimable})"
        claimants = [name for name, kernel in self.discovered.items() if layout in claimed_variants(kernel)]
        if self.explicit and claimants:
            valid += f", or a --kernel that claims {layout} ({_names(claimants)})"
        return f"--layout {layout!r}: not claimed by {self.kernels if self.explicit else 'any discovered kernel'}; " \
               f"valid: {valid}"

    def unrunnable(self) -> str:
        """No selected kernel can run against any of the tables here; for a kernel refused for lacking
        ``bind(contract)``, adding it is named as a fix beside the tables it can run against (``BIND_GUIDE``)."""
        named = len(self.selected) > 1  # with one kernel, the option names it already
        reasons = dict.fromkeys(f"{name}: {why}" if named else why for name, kernel in self.selected.items()
                                for platform in self.platforms if (why := blocker(kernel, platform)))
        natives = [name for name in platform_names()
                   if any(blocker(kernel, resolve_platform(name)) is None for kernel in self.selected.values())]
        if natives and len(self.platforms) == 1:
            valid = f"--platform {' or '.join(natives)} (where {self.they} can run here)"
        else:
            valid = f"a kernel that can run here ({_names(self.runnable(self.discovered))})"
        # the other fix of a kernel that only lacks bind(contract): the vendor's, named with where it is explained
        unbound = [name for name, kernel in self.selected.items()
                   if any(blocker(kernel, platform) == NO_BIND for platform in self.platforms)]
        if unbound:
            valid += f", or add bind(contract) to {_names(unbound)} ({BIND_GUIDE})"
        return f"{self.kernels}: cannot be certified on {self.where} here ({'; '.join(reasons)}); valid: {valid}"

    def nothing_claimed_under_test(self) -> str:
        """The selected kernels that can run here claim none of the layouts under test."""
        runnable = self.runnable()
        if self.wanted:  # each is claimed by a selected kernel (checked first): only by ones that cannot run here
            return (f"--layout {', '.join(map(repr, self.wanted))}: claimed only by selected kernels that cannot run "
                    f"on {self.where} here; valid: a layout the ones that can ({_names(runnable)}) claim "
                    f"({_names(self.claimable(runnable)) or 'none'})")
        claimed = dict.fromkeys(layout for kernel in runnable.values() for layout in claimed_variants(kernel))
        supporting = [name for name in platform_names() if set(claimed) & set(every_variant(resolve_platform(name)))]
        return (f"{self.kernels}: claims none of the layouts {self.where} supports (claimed: {_names(claimed)}); "
                f"valid: a platform that supports one ({_names(supporting) or 'none bundled'})")

    def empty_tier(self) -> str:
        """Kernel and layout pairs are left, but ``--tier`` has no case of them."""
        regular = [pair for platform in self.platforms for pair in pairs(self.selected, platform, self.wanted,
                                                                         "regular")]
        tier_ops = large_ops() if runs_tier(self.tier, "large") else \
            stream_ops() if runs_tier(self.tier, "stream") else graph_ops()
        if not any(pair.op in tier_ops for pair in regular):
            return (f"--tier {self.tier}: its cases are of the ops ({_names(tier_ops)}), and no selected "
                    f"kernel that can run here implements one; valid: --tier regular or all")
        on_gpu = sorted({pair.kernel for pair in regular if pair.op in tier_ops and pair.device == "cuda"})
        if not on_gpu:
            why = ("torch sees none here" if not torch.cuda.is_available()
                   else f"on {self.where} the selected kernels run on the CPU")
            needs = "streams" if self.tier == "stream" else "CUDA graphs"
            return (f"--tier {self.tier}: {needs} need a CUDA device, and {why}; valid: --tier regular, large or "
                    f"all (all reports the {self.tier} tier as not applicable where it cannot run)")
        return (f"--tier graph: the selected kernels that run on a CUDA device here ({_names(on_gpu)}) declare "
                f"graph_safe = False; valid: --tier regular, large or all, or a kernel that does not decline the tier")
