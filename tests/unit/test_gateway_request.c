/* test_gateway_request.c — the gateway's request state machine
 * (src/gateway/request.c), sans I/O: the file is included, as h2o tests its
 * protocol handlers, so its tables and helpers run on a bare request with no
 * connection, loop or socket.  Every legal move of the table in request.c's
 * header, every other one refused (DONE is final, nothing goes back to
 * RECEIVING, no response before an upstream call), a request walked through
 * the phases of a routed answer with fallback, the "head committed" reading
 * of the states that fallback and the error path rely on, the client's
 * half-close while only the session's look at the answer is pending, the
 * verdict on a head before its body that HTTP/2 asks for, and an illegal move
 * stopping a debug build. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../src/gateway/request.c"

/* The legal moves, as request.c's header documents them. */
static const struct {
    rq_state_t from, to;
} legal[] = {
    {RQ_RECEIVING, RQ_ROUTING},     {RQ_RECEIVING, RQ_DONE},
    {RQ_ROUTING, RQ_OFFLOOP},       {RQ_ROUTING, RQ_UPSTREAM},        {RQ_ROUTING, RQ_DONE},
    {RQ_OFFLOOP, RQ_DONE},
    {RQ_UPSTREAM, RQ_UPSTREAM},     {RQ_UPSTREAM, RQ_RESPONDING},     {RQ_UPSTREAM, RQ_DONE},
    {RQ_RESPONDING, RQ_UPSTREAM},   {RQ_RESPONDING, RQ_RESP_EFFECT},  {RQ_RESPONDING, RQ_RESP_FINISH},
    {RQ_RESPONDING, RQ_DONE},
    {RQ_RESP_EFFECT, RQ_DONE},
    {RQ_RESP_FINISH, RQ_DONE},
};

static int is_legal(rq_state_t from, rq_state_t to)
{
    for (size_t i = 0; i < VSR_ARRAY_LEN(legal); i++)
        if (legal[i].from == from && legal[i].to == to)
            return 1;
    return 0;
}

static void test_legal_moves(void **state)
{
    (void)state;
    for (size_t i = 0; i < VSR_ARRAY_LEN(legal); i++)
        assert_true(vsr__request_can_move(legal[i].from, legal[i].to));
}

static void test_illegal_moves(void **state)
{
    (void)state;
    unsigned refused = 0;
    for (unsigned f = 0; f < RQ_N_STATES; f++)
        for (unsigned t = 0; t < RQ_N_STATES; t++)
            if (!is_legal((rq_state_t)f, (rq_state_t)t)) {
                assert_false(vsr__request_can_move((rq_state_t)f, (rq_state_t)t));
                refused++;
            }
    assert_int_equal(refused, RQ_N_STATES * RQ_N_STATES - VSR_ARRAY_LEN(legal));
    /* the ones that matter most, by name */
    for (unsigned t = 0; t < RQ_N_STATES; t++) {
        assert_false(vsr__request_can_move(RQ_DONE, (rq_state_t)t)); /* finished is final */
        assert_false(vsr__request_can_move((rq_state_t)t, RQ_RECEIVING)); /* nothing is received twice */
    }
    assert_false(vsr__request_can_move(RQ_RECEIVING, RQ_UPSTREAM));   /* never proxied undispatched */
    assert_false(vsr__request_can_move(RQ_ROUTING, RQ_RESPONDING));   /* no response head without a call */
    assert_false(vsr__request_can_move(RQ_OFFLOOP, RQ_UPSTREAM));     /* a management call is answered locally */
    assert_false(vsr__request_can_move(RQ_RESP_EFFECT, RQ_UPSTREAM)); /* no fallback once the body ended */
    assert_false(vsr__request_can_move(RQ_RESP_FINISH, RQ_RESPONDING));
    /* out of range */
    assert_false(vsr__request_can_move(RQ_N_STATES, RQ_DONE));
    assert_false(vsr__request_can_move(RQ_ROUTING, RQ_N_STATES));
    assert_false(vsr__request_can_move((rq_state_t)-1, RQ_DONE));
}

/* A routed request whose first candidate failed before its head, whose
 * second answered with a buffered (translated) head, which then failed, so
 * that a third answered and its translated stream ended. */
static void test_walk(void **state)
{
    (void)state;
    request_t *req = calloc(1, sizeof(*req));
    assert_int_equal(req->state, RQ_RECEIVING); /* a new request's, as request_new makes it */
    static const struct {
        rq_state_t to;
        int head_sent;
    } walk[] = {
        {RQ_ROUTING, 0},    {RQ_UPSTREAM, 0},    {RQ_UPSTREAM, 0}, {RQ_RESPONDING, 1},
        {RQ_UPSTREAM, 0},   {RQ_UPSTREAM, 0},    {RQ_RESPONDING, 1}, {RQ_RESP_EFFECT, 1},
        {RQ_DONE, 0},
    };
    for (size_t i = 0; i < VSR_ARRAY_LEN(walk); i++) {
        vsr__request_enter(req, walk[i].to);
        assert_int_equal(req->state, walk[i].to);
        assert_int_equal(vsr__request_head_sent(req), walk[i].head_sent);
    }
    free(req);
}

static void test_head_sent(void **state)
{
    (void)state;
    request_t req;
    memset(&req, 0, sizeof(req));
    for (unsigned s = 0; s < RQ_N_STATES; s++) {
        req.state = s;
        int want = s == RQ_RESPONDING || s == RQ_RESP_EFFECT || s == RQ_RESP_FINISH;
        assert_int_equal(vsr__request_head_sent(&req), want);
    }
}

/* The client's EOF counts as "answered" only while the request waits on
 * the session after its whole answer went out. */
static void test_peer_left(void **state)
{
    (void)state;
    request_t req;
    memset(&req, 0, sizeof(req));
    for (unsigned s = 0; s < RQ_N_STATES; s++) {
        req.state = s;
        req.keep_alive = 1;
        int left = vsr__request_peer_left(&req);
        assert_int_equal(left, s == RQ_RESP_FINISH);
        assert_int_equal(req.keep_alive, s == RQ_RESP_FINISH ? 0 : 1);
    }
}

/* The verdict on a head before its body (an HTTP/2 stream's HEADERS), in
 * its order: no target (a tunnel) first, then the transport's own, then a
 * declared length over the body limit; with no body to come, no key check
 * (which is dispatch's, on the whole request). */
static void test_admit(void **state)
{
    (void)state;
    vsr_listener_conf_t lc;
    memset(&lc, 0, sizeof(lc));
    lc.max_body_bytes = 100;
    listener_t l;
    memset(&l, 0, sizeof(l));
    l.conf = &lc;
    vsr_http_head_t h;
    memset(&h, 0, sizeof(h));
    request_t req;
    memset(&req, 0, sizeof(req));
    req.l = &l;
    req.head = &h;
    h.content_length = 1000;
    assert_int_equal(vsr__request_admit(&req, 431, 0), 400); /* CONNECT: no target */
    h.target = VSR_SLICE_LIT("/v1/chat/completions");
    assert_int_equal(vsr__request_admit(&req, 431, 0), 431); /* the transport's verdict comes next */
    assert_int_equal(vsr__request_admit(&req, 400, 0), 400);
    assert_int_equal(vsr__request_admit(&req, 0, 0), 413);   /* a declared length over the limit */
    h.content_length = 100;
    assert_int_equal(vsr__request_admit(&req, 0, 0), 0);     /* at the limit */
    h.content_length = -1;
    assert_int_equal(vsr__request_admit(&req, 0, 0), 0);     /* none declared */
    assert_int_equal(req.unauth, 0);                          /* no body to come: no key check yet */
}

/* The body's end: as long as the head declared, or none declared. */
static void test_body_whole(void **state)
{
    (void)state;
    vsr_http_head_t h;
    memset(&h, 0, sizeof(h));
    request_t req;
    memset(&req, 0, sizeof(req));
    req.head = &h;
    vsr_buf_init(&req.body, 0);
    h.content_length = -1;
    assert_true(vsr__request_body_whole(&req));
    h.content_length = 5;
    assert_false(vsr__request_body_whole(&req));
    vsr_buf_append(&req.body, "abcd", 4);
    assert_false(vsr__request_body_whole(&req));
    vsr_buf_append(&req.body, "e", 1);
    assert_true(vsr__request_body_whole(&req));
    vsr_buf_append(&req.body, "f", 1);
    assert_false(vsr__request_body_whole(&req)); /* longer than declared is malformed too */
    h.content_length = 0;
    vsr_buf_reset(&req.body);
    assert_true(vsr__request_body_whole(&req));
    vsr_buf_free(&req.body);
}

/* An illegal move is a bug: a debug build stops there (VSR_ASSERT). */
static void test_illegal_enter_stops(void **state)
{
    (void)state;
#ifdef NDEBUG
    skip();
#else
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0)
            dup2(fd, 2); /* the BUG line is expected */
        request_t req;
        memset(&req, 0, sizeof(req));
        req.state = RQ_DONE;
        vsr__request_enter(&req, RQ_ROUTING);
        _exit(0); /* not reached when the move is refused */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_legal_moves),
        cmocka_unit_test(test_illegal_moves),
        cmocka_unit_test(test_walk),
        cmocka_unit_test(test_head_sent),
        cmocka_unit_test(test_peer_left),
        cmocka_unit_test(test_admit),
        cmocka_unit_test(test_body_whole),
        cmocka_unit_test(test_illegal_enter_stops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
