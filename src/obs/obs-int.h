/* obs-int.h — private to obs/: text helpers shared by the access log and the metrics. */
#ifndef VSR_OBS_INT_H
#define VSR_OBS_INT_H

#include "obs/obs.h"

/* Copies the first bytes of `in` to `out`, at most `max_in` input bytes, so
 * that the result is well-formed UTF-8: each byte that does not belong to a
 * well-formed sequence (RFC 3629: no overlongs, no surrogates, nothing past
 * U+10FFFF) becomes U+FFFD, and a well-formed sequence that would end past
 * max_in is left out whole rather than cut.  Log readers and Prometheus
 * parsers reject invalid UTF-8, and the bytes come from clients.  `out` must
 * hold 3 * max_in bytes.  Returns the number of bytes written. */
size_t vsr__obs_utf8_clean(vsr_slice_t in, size_t max_in, char *out);

#endif /* VSR_OBS_INT_H */
