/* fuzz_store_record.c — arbitrary bytes as a record of the redis index stream
 * (what another replica, or anything else with access to the server, wrote).
 * Beyond "no crash, no leak": a record that decodes encodes back to the same
 * bytes, and its parts stay within their bounds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "store/store-int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vsr_slice_t rec = vsr_slice((const char *)data, size), key, scope, part;
    uint64_t expiry;
    float emb[VSR_STORE_DIM];
    if (vsr__store_decode_record(rec, &expiry, &key, &scope, &part, emb) != VSR_OK)
        return 0;
    if (key.len < 1 || key.len > VSR_STORE_MAX_KEY || scope.len > VSR_STORE_MAX_TAG || part.len > VSR_STORE_MAX_TAG)
        abort();
    vsr_buf_t out;
    vsr_buf_init(&out, 0);
    vsr__store_encode_record(&out, key, expiry, scope, part, emb);
    if (out.len != size || memcmp(out.data, data, size) != 0) {
        fprintf(stderr, "fuzz_store_record: the record does not encode back to its bytes\n");
        abort();
    }
    vsr_buf_free(&out);
    return 0;
}
