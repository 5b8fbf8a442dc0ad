"""zoopt.library_logs drops exactly the two import-time messages, nothing else those loggers say."""

import logging

import zoopt  # noqa: F401  (installs the filters)
from zoopt import library_logs

KERNEL = ("Failed to load /venv/lib/python3.11/site-packages/torchao/_C_mxfp8.cpython-310-x86_64-linux-gnu.so: "
          "Could not load this library")
CUTLASS = "Failed to load /x/site-packages/torchao/_C_cutlass_90a.abi3.so: Could not load this library"
ENUM = ("<enum 'KernelPreference'> is an Enum subclass and is now natively supported by torch.compile as an "
        "opaque value type. Calling register_constant() on Enum subclasses is deprecated")


def said(caplog, logger: str, message: str) -> bool:
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        logging.getLogger(logger).warning(message)
    return any(r.getMessage() == message for r in caplog.records)


def test_the_two_import_messages_are_dropped_on_a_machine_without_cuda(caplog, monkeypatch):
    monkeypatch.setattr(library_logs, "_no_cuda", lambda: True)
    assert not said(caplog, "torchao", KERNEL)
    assert not said(caplog, "torchao", CUTLASS)
    assert not said(caplog, "torch.utils._pytree", ENUM)


def test_everything_else_is_kept(caplog, monkeypatch):
    monkeypatch.setattr(library_logs, "_no_cuda", lambda: True)
    assert said(caplog, "torchao", "Failed to load /x/site-packages/torchao/_C_something_else.so: bad")
    assert said(caplog, "torchao", "int4 weight-only quantization needs a CUDA device")
    assert said(caplog, "torch.utils._pytree", "some other pytree warning")


def test_on_a_cuda_machine_a_kernel_that_fails_to_load_is_reported(caplog, monkeypatch):
    monkeypatch.setattr(library_logs, "_no_cuda", lambda: False)
    assert said(caplog, "torchao", KERNEL)


def test_installing_twice_adds_one_filter():
    library_logs.quiet_library_logs()
    library_logs.quiet_library_logs()
    assert len(logging.getLogger("torchao").filters) == 1
