/*
 * proto-int.h — private to proto/: the codecs' short spellings of json.h's
 * member helpers (vsr_json_member, vsr_json_is, vsr_json_absent,
 * vsr_json_str_is), over a codec's context c holding its parsed document in
 * c->j.  One definition for the three codecs.
 */
#ifndef VSR_PROTO_INT_H
#define VSR_PROTO_INT_H

#include "json/json.h"

#define get(c, t, key) vsr_json_member(&(c)->j, (t), (key))
#define is(c, t, type) vsr_json_is(&(c)->j, (t), (type))
#define absent(c, t) vsr_json_absent(&(c)->j, (t))
#define str_is(c, t, s) vsr_json_str_is(&(c)->j, (t), (s))

#endif /* VSR_PROTO_INT_H */
