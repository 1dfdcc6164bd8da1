"""``ModelArgs``: the model part of the server config, pickled to every spawned worker process.

All fields have values from construction on (rtp-llm never set ``extra_data_path`` and
``local_extra_data_path``, so reading them raised AttributeError). Unpickling state from before a
field existed gives that field its default instead of an object that raises on access.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from rtp_ref.errors import RtpRefError


@dataclass(slots=True)
class ModelArgs:
    """What the server knows about the model to load (see the module doc)."""

    ckpt_path: str = ""
    tokenizer_path: str = ""
    extra_data_path: str = ""
    local_extra_data_path: str = ""
    model_type: str = ""
    task_type: str | None = None
    act_type: str | None = None
    mla_ops_type: str | None = None
    max_seq_len: int | None = None
    quantization: str | None = None
    enable_fp32_lm_head: bool | None = None
    external_model_packages: list[str] = field(default_factory=list)

    def __getstate__(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __setstate__(self, state: dict[str, object]) -> None:
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(state) - names)
        if unknown:
            raise RtpRefError(f"ModelArgs pickle has fields this version does not know: {unknown}")
        defaults = ModelArgs()
        for name in names:
            setattr(self, name, state[name] if name in state else getattr(defaults, name))


#: Fields a draft (MTP/EAGLE) model sets from its own checkpoint.
PROPOSE_OWN_FIELDS = frozenset({"ckpt_path", "model_type", "max_seq_len", "quantization"})
#: Fields that describe the main checkpoint's files and do not carry over to the draft model.
PROPOSE_RESET_FIELDS = frozenset({"extra_data_path", "local_extra_data_path"})


def derive_propose_args(
    main: ModelArgs,
    *,
    ckpt_path: str,
    model_type: str,
    max_seq_len: int | None = None,
    quantization: str | None = None,
) -> ModelArgs:
    """ModelArgs of the draft (propose) model: its own checkpoint and type, the main model's rest.

    Every field that is neither the draft's own nor reset is inherited, so a field added later
    (``external_model_packages`` was dropped by rtp-llm's hand-written copy) carries over unless
    someone decides otherwise here.
    """
    reset = {name: getattr(ModelArgs(), name) for name in PROPOSE_RESET_FIELDS}
    return dataclasses.replace(
        main,
        ckpt_path=ckpt_path,
        model_type=model_type,
        max_seq_len=max_seq_len,
        quantization=quantization,
        external_model_packages=list(main.external_model_packages),  # not one list shared by both
        **reset,
    )
