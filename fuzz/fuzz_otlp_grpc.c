/*
 * fuzz_otlp_grpc.c — arbitrary bytes as an OTLP/gRPC collector's side of the
 * connection: the blocking gRPC client (upstream/grpc_client.c) makes one
 * TraceService/Export call to an in-process listener that writes the input
 * and closes; what the call returns is then read as the tracer reads it
 * (the grpc-status, the response message's partial_success).  Whatever the
 * bytes, the call ends before its deadline, its message is printable and
 * NUL-terminated, a status is -1 or 0..16, an answer lies inside what was
 * sent, and nothing leaks.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "obs/obs.h"
#include "upstream/upstream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "fuzz_otlp_grpc: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

static int lfd = -1;
static uint16_t lport;

typedef struct {
    const uint8_t *data;
    size_t size;
} input_t;

/* Accepts the client, reads its preface (whatever arrives first), writes
 * the input and closes. */
static void *serve_one(void *arg)
{
    input_t *in = arg;
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    char buf[4096];
    (void)!recv(fd, buf, sizeof(buf), 0);
    size_t off = 0;
    while (off < in->size) {
        ssize_t w = send(fd, in->data + off, in->size - off, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    shutdown(fd, SHUT_WR);
    while (recv(fd, buf, sizeof(buf), 0) > 0) /* until the client is done */
        ;
    close(fd);
    return NULL;
}

static void listen_once(void)
{
    if (lfd >= 0)
        return;
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof(a);
    CHECK(bind(lfd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(lfd, 4) == 0);
    getsockname(lfd, (struct sockaddr *)&a, &l);
    lport = ntohs(a.sin_port);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    listen_once();
    input_t in = {data, size};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, serve_one, &in) == 0);
    vsr_grpc_client_t *c = vsr_grpc_client_new("127.0.0.1", lport, 0, NULL);
    CHECK(c != NULL);
    static const uint8_t req[] = {0x0a, 0x00}; /* one empty ResourceSpans */
    vsr_grpc_client_result_t res;
    uint64_t start = vsr_now_ms();
    int rc = vsr_grpc_client_call(c, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", req, sizeof(req),
                                  start + 2000, &res);
    CHECK(vsr_now_ms() <= start + 2000 + 500);
    CHECK(memchr(res.message, '\0', sizeof(res.message)) != NULL);
    for (const char *p = res.message; *p; p++)
        CHECK(*p >= 0x20 && *p < 0x7f);
    CHECK(res.grpc_status >= -1 && res.grpc_status <= 16);
    if (rc == VSR_OK && res.answer_len > 0) {
        CHECK(res.answer_len < size);
        int64_t rejected;
        char msg[64];
        if (vsr_tracer_grpc_answer(res.answer, res.answer_len, &rejected, msg, sizeof(msg)) == VSR_OK) {
            CHECK(memchr(msg, '\0', sizeof(msg)) != NULL);
            for (const char *p = msg; *p; p++)
                CHECK(*p >= 0x20 && *p < 0x7f);
        }
    }
    vsr_grpc_client_free(c);
    pthread_join(th, NULL);

    /* the answer's parts on their own, over the same bytes */
    vsr_slice_t s = vsr_slice((const char *)data, size);
    int st = vsr_grpc_status_parse(s);
    CHECK(st >= -1 && st <= 16);
    char m[32];
    size_t n = vsr_grpc_message_decode(s, m, sizeof(m));
    CHECK(n < sizeof(m) && m[n] == '\0' && n <= size);
    const uint8_t *msg;
    size_t len;
    if (vsr_grpc_unary_answer(data, size, &msg, &len) == VSR_OK)
        CHECK(size == 0 ? msg == NULL && len == 0 : (msg == data + 5 && len == size - 5)); /* one frame, maybe empty */
    return 0;
}
