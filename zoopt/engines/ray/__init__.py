"""The Ray engine: ES on engine replicas in Ray actors (:mod:`.replicated_engine`), the driver's pool of
replicas (:mod:`.pool`), one replica (:mod:`.replica`) and the cluster it runs on (:mod:`.cluster`)."""

from .replicated_engine import RayEngine

__all__ = ["RayEngine"]
