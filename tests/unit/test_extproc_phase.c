/* test_extproc_phase.c — an ext_proc Process stream's phase machine
 * (src/extproc/stream.c), sans I/O: the file is included, as h2o tests its
 * protocol handlers, so its move table runs on a bare stream with no
 * session, engine or transport.  Every legal move of the table in
 * stream.c's header, every other one refused (FINISHED is final, nothing
 * goes back to REQ_HEADERS, no response phase before routing), the walks a
 * stream takes, and an illegal move stopping a debug build. */
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

#include "../../src/extproc/stream.c"

/* The legal moves, as stream.c's header documents them. */
static const struct {
    state_t from, to;
} legal[] = {
    {ST_REQ_HEADERS, ST_REQ_BODY}, {ST_REQ_HEADERS, ST_ROUTED}, {ST_REQ_HEADERS, ST_DONE},
    {ST_REQ_HEADERS, ST_FINISHED}, {ST_REQ_BODY, ST_ROUTED},    {ST_REQ_BODY, ST_DONE},
    {ST_REQ_BODY, ST_FINISHED},    {ST_ROUTED, ST_RESP_BODY},   {ST_ROUTED, ST_FINISHED},
    {ST_RESP_BODY, ST_DONE},       {ST_RESP_BODY, ST_FINISHED}, {ST_DONE, ST_FINISHED},
};

static int is_legal(state_t from, state_t to)
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
        assert_true(xp_can_move(legal[i].from, legal[i].to));
}

static void test_illegal_moves(void **state)
{
    (void)state;
    unsigned refused = 0;
    for (unsigned f = 0; f < ST_N_STATES; f++)
        for (unsigned t = 0; t < ST_N_STATES; t++)
            if (!is_legal((state_t)f, (state_t)t)) {
                assert_false(xp_can_move((state_t)f, (state_t)t));
                refused++;
            }
    assert_int_equal(refused, ST_N_STATES * ST_N_STATES - VSR_ARRAY_LEN(legal));
    for (unsigned t = 0; t < ST_N_STATES; t++) {
        assert_false(xp_can_move(ST_FINISHED, (state_t)t));     /* the status is given once */
        assert_false(xp_can_move((state_t)t, ST_REQ_HEADERS));  /* one request per stream */
        assert_false(xp_can_move((state_t)t, (state_t)t));      /* no state is entered twice */
    }
    assert_false(xp_can_move(ST_REQ_HEADERS, ST_RESP_BODY)); /* no response before routing */
    assert_false(xp_can_move(ST_REQ_BODY, ST_RESP_BODY));
    assert_false(xp_can_move(ST_ROUTED, ST_DONE));           /* the response headers come first */
    assert_false(xp_can_move(ST_DONE, ST_RESP_BODY));        /* an immediate answer ends the phases */
    assert_false(xp_can_move(ST_RESP_BODY, ST_ROUTED));
    assert_false(xp_can_move(ST_N_STATES, ST_FINISHED));
    assert_false(xp_can_move(ST_ROUTED, ST_N_STATES));
    assert_false(xp_can_move((state_t)-1, ST_FINISHED));
}

/* The walks a stream takes: a routed request with a body and a response, a
 * request without a body, an immediate answer on the request and one on
 * the response; each ends FINISHED, and only FINISHED reads as finished. */
static void test_walks(void **state)
{
    (void)state;
    static const state_t walks[][6] = {
        {ST_REQ_BODY, ST_ROUTED, ST_RESP_BODY, ST_FINISHED},
        {ST_ROUTED, ST_RESP_BODY, ST_DONE, ST_FINISHED},
        {ST_DONE, ST_FINISHED},
        {ST_REQ_BODY, ST_DONE, ST_FINISHED},
        {ST_FINISHED}, /* an error on the first message */
    };
    for (size_t w = 0; w < VSR_ARRAY_LEN(walks); w++) {
        vsr_xp_stream_t *st = calloc(1, sizeof(*st));
        assert_int_equal(st->state, ST_REQ_HEADERS); /* a new stream's, as vsr_xp_stream_open makes it */
        for (size_t i = 0; i < 6 && (i == 0 || walks[w][i - 1] != ST_FINISHED); i++) {
            assert_false(finished(st));
            enter(st, walks[w][i]);
            assert_int_equal(st->state, walks[w][i]);
        }
        assert_true(finished(st));
        assert_true(vsr_xp_stream_finished(st));
        free(st);
    }
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
        vsr_xp_stream_t st;
        memset(&st, 0, sizeof(st));
        st.state = ST_ROUTED;
        enter(&st, ST_DONE);
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
        cmocka_unit_test(test_walks),
        cmocka_unit_test(test_illegal_enter_stops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
