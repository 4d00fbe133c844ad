"""Host-side primitives for running untrusted code: leased uid ranges and cgroups.

The judge sandbox and the desktops both run code that must not act as host root: each
takes host uids from `lease_ids` (so two sandboxes never share a uid, across processes)
and caps a whole process tree with a `Cgroup` (memory and process count).
"""

from runtime.isolation.cgroup import Cgroup, CgroupError
from runtime.isolation.ids import IdLease, lease_ids

__all__ = ["Cgroup", "CgroupError", "IdLease", "lease_ids"]
