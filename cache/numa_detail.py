"""Where the numasched.io/numa-detail annotation's functions used to live; they are in
numasched.api.numa_detail now, shared by the exporter and the cache. These names remain for the
tests that still import them from here."""

from numasched.api.numa_detail import NUMA_DETAIL_ANNOTATION as NUMA_DETAIL_ANNOTATION
from numasched.api.numa_detail import apply_numa_detail as apply_numa_detail
from numasched.api.numa_detail import format_numa_detail as format_numa_detail
from numasched.api.numa_detail import parse_numa_detail as parse_numa_detail
