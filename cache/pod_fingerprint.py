"""Where the pods fingerprint used to live; it is numasched.api.pod_fingerprint now, shared by the
exporter and the cache. These names remain for the modules that still import them from here."""

from numasched.api.pod_fingerprint import pods_fingerprint as pods_fingerprint
from numasched.api.pod_fingerprint import xxh64 as xxh64
