/*
 * fuzz_http_response.c — arbitrary bytes as an HTTP/1.x response stream,
 * with the same whole/split/byte-by-byte differential checks as requests
 * (input byte 0 bit 5 marks the request as HEAD).
 */
#define FUZZ_KIND VSR_HTTP_RESPONSE
#include "fuzz_http_request.c"
