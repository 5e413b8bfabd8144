/* test_replay_store.c — the router replay store's memory backend: newest
 * first, eviction past a put's max_records and past the byte bound (counted),
 * TTL, get/delete, bad ids, and a redis store whose server cannot be reached
 * (a put never waits; the failure is counted, reads fail with VSR_ERR_IO),
 * and the same of a postgres store, with its configuration's checks and its
 * queue's bound while the server does not answer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "store/store.h"

typedef struct {
    int written, failed, evicted;
} counts_t;

static void count(void *ud, const char *result)
{
    counts_t *c = ud;
    if (strcmp(result, "written") == 0)
        __atomic_add_fetch(&c->written, 1, __ATOMIC_SEQ_CST);
    else if (strcmp(result, "failed") == 0)
        __atomic_add_fetch(&c->failed, 1, __ATOMIC_SEQ_CST); /* the caller's thread or the writer's */
    else if (strcmp(result, "evicted") == 0)
        __atomic_add_fetch(&c->evicted, 1, __ATOMIC_SEQ_CST);
}

static void put(vsr_replay_store_t *st, const char *id, size_t max)
{
    char sum[64], rec[64];
    snprintf(sum, sizeof(sum), "{\"id\":\"%s\"}", id);
    snprintf(rec, sizeof(rec), "{\"id\":\"%s\",\"request\":{}}", id);
    assert_int_equal(vsr_replay_put(st, vsr_slice_cstr(id), 1, vsr_slice_cstr(sum), vsr_slice_cstr(rec), max), VSR_OK);
}

static void list_is(vsr_replay_store_t *st, size_t limit, const char *want, uint64_t want_total)
{
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    uint64_t total = 0;
    assert_int_equal(vsr_replay_list(st, limit, &b, &total), VSR_OK);
    vsr_buf_append(&b, "", 1);
    assert_string_equal(b.data, want);
    assert_int_equal(total, want_total);
    vsr_buf_free(&b);
}

static void test_memory_order_eviction_get_delete(void **state)
{
    (void)state;
    counts_t c = {0};
    vsr_replay_config_t cfg;
    vsr_replay_config_init(&cfg);
    cfg.count = count;
    cfg.count_ud = &c;
    vsr_replay_store_t *st = vsr_replay_open(&cfg, NULL);
    assert_non_null(st);
    list_is(st, 10, "[]", 0);
    put(st, "a", 3);
    put(st, "b", 3);
    put(st, "c", 3);
    put(st, "d", 3);
    assert_int_equal(c.written, 4);
    assert_int_equal(c.evicted, 1);
    list_is(st, 10, "[{\"id\":\"d\"},{\"id\":\"c\"},{\"id\":\"b\"}]", 3);
    list_is(st, 2, "[{\"id\":\"d\"},{\"id\":\"c\"}]", 3);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    assert_int_equal(vsr_replay_get(st, VSR_SLICE_LIT("a"), &b), VSR_ERR_NOT_FOUND);
    assert_int_equal(vsr_replay_get(st, VSR_SLICE_LIT("c"), &b), VSR_OK);
    vsr_buf_append(&b, "", 1);
    assert_string_equal(b.data, "{\"id\":\"c\",\"request\":{}}");
    assert_int_equal(vsr_replay_delete(st, VSR_SLICE_LIT("c")), VSR_OK);
    assert_int_equal(vsr_replay_delete(st, VSR_SLICE_LIT("c")), VSR_ERR_NOT_FOUND);
    list_is(st, 10, "[{\"id\":\"d\"},{\"id\":\"b\"}]", 2);
    /* a smaller bound from a later put applies at once */
    put(st, "e", 1);
    list_is(st, 10, "[{\"id\":\"e\"}]", 1);
    assert_int_equal(c.evicted, 3);
    /* bad ids are refused and counted */
    assert_int_equal(vsr_replay_put(st, VSR_SLICE_NULL, 1, VSR_SLICE_LIT("{}"), VSR_SLICE_LIT("{}"), 5),
                     VSR_ERR_INVALID);
    assert_int_equal(c.failed, 1);
    vsr_buf_free(&b);
    vsr_replay_unref(st);
}

static void test_memory_bytes_and_ttl(void **state)
{
    (void)state;
    counts_t c = {0};
    vsr_replay_config_t cfg;
    vsr_replay_config_init(&cfg);
    cfg.count = count;
    cfg.count_ud = &c;
    cfg.max_bytes = 1000;
    cfg.max_record_bytes = 600;
    cfg.ttl_ms = 1000;
    vsr_replay_store_t *st = vsr_replay_open(&cfg, NULL);
    char big[500];
    memset(big, 'x', sizeof(big));
    /* each record takes ~500 bytes plus overhead: only one fits in 1000 */
    assert_int_equal(vsr_replay_put(st, VSR_SLICE_LIT("r1"), 1, VSR_SLICE_LIT("{}"), vsr_slice(big, sizeof(big)), 100),
                     VSR_OK);
    assert_int_equal(vsr_replay_put(st, VSR_SLICE_LIT("r2"), 1, VSR_SLICE_LIT("{}"), vsr_slice(big, sizeof(big)), 100),
                     VSR_OK);
    assert_int_equal(c.evicted, 1);
    /* one larger than max_record_bytes is refused */
    char huge[700];
    memset(huge, 'y', sizeof(huge));
    assert_int_equal(vsr_replay_put(st, VSR_SLICE_LIT("r3"), 1, VSR_SLICE_LIT("{}"), vsr_slice(huge, sizeof(huge)), 100),
                     VSR_ERR_TOO_BIG);
    assert_int_equal(c.failed, 1);
    list_is(st, 10, "[{}]", 1);
    usleep(1100 * 1000); /* past the TTL: gone, whatever the clock's granularity */
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    assert_int_equal(vsr_replay_get(st, VSR_SLICE_LIT("r2"), &b), VSR_ERR_NOT_FOUND);
    list_is(st, 10, "[]", 0);
    vsr_buf_free(&b);
    vsr_replay_unref(st);
}

static void test_redis_unreachable(void **state)
{
    (void)state;
    static counts_t c; /* the writer counts until it has freed the store, after the last unref */
    vsr_replay_config_t cfg;
    vsr_replay_config_init(&cfg);
    cfg.backend = VSR_STORE_REDIS;
    cfg.address = "127.0.0.1:1"; /* nothing listens on port 1 */
    cfg.timeout_ms = 100;
    cfg.max_queue = 2;
    cfg.count = count;
    cfg.count_ud = &c;
    vsr_replay_store_t *st = vsr_replay_open(&cfg, NULL);
    assert_non_null(st);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    uint64_t total;
    assert_int_equal(vsr_replay_get(st, VSR_SLICE_LIT("x"), &b), VSR_ERR_IO);
    assert_int_equal(vsr_replay_list(st, 5, &b, &total), VSR_ERR_IO);
    assert_int_equal(vsr_replay_delete(st, VSR_SLICE_LIT("x")), VSR_ERR_IO);
    /* puts return at once; each is counted failed by the writer or at close */
    for (int i = 0; i < 5; i++) {
        char id[8];
        snprintf(id, sizeof(id), "i%d", i);
        vsr_replay_put(st, vsr_slice_cstr(id), 1, VSR_SLICE_LIT("{}"), VSR_SLICE_LIT("{}"), 10);
    }
    vsr_replay_unref(st); /* returns at once; the writer finishes on its own */
    for (int i = 0; i < 1000 && __atomic_load_n(&c.failed, __ATOMIC_SEQ_CST) < 5; i++)
        usleep(10 * 1000);
    assert_int_equal(__atomic_load_n(&c.failed, __ATOMIC_SEQ_CST), 5);
    assert_int_equal(c.written, 0);
    vsr_buf_free(&b);
}

static void test_postgres_unreachable_and_bad_config(void **state)
{
    (void)state;
    static counts_t c;
    vsr_replay_config_t cfg;
    vsr_replay_config_init(&cfg);
    cfg.backend = VSR_STORE_POSTGRES;
    cfg.pg_host = "127.0.0.1";
    cfg.pg_port = 1; /* nothing listens on port 1 */
    cfg.pg_database = "rr";
    cfg.pg_user = "vsr";
    cfg.count = count;
    cfg.count_ud = &c;
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    /* the table name goes into SQL: an identifier only */
    cfg.pg_table = "t; DROP TABLE x";
    assert_null(vsr_replay_open(&cfg, &err));
    assert_non_null(strstr(err.data, "table_name"));
    cfg.pg_table = NULL;
    cfg.pg_user = NULL;
    assert_null(vsr_replay_open(&cfg, NULL));
    cfg.pg_user = "vsr";
    vsr_replay_store_t *st = vsr_replay_open(&cfg, NULL);
    assert_non_null(st);
    vsr_buf_t b;
    vsr_buf_init(&b, 0);
    uint64_t total;
    assert_int_equal(vsr_replay_get(st, VSR_SLICE_LIT("x"), &b), VSR_ERR_IO);
    assert_int_equal(vsr_replay_list(st, 5, &b, &total), VSR_ERR_IO);
    assert_int_equal(vsr_replay_delete(st, VSR_SLICE_LIT("x")), VSR_ERR_IO);
    for (int i = 0; i < 5; i++) {
        char id[8];
        snprintf(id, sizeof(id), "i%d", i);
        assert_int_equal(
            vsr_replay_put(st, vsr_slice_cstr(id), 1, VSR_SLICE_LIT("{}"), VSR_SLICE_LIT("{}"), 10), VSR_OK);
    }
    for (int i = 0; i < 1000 && __atomic_load_n(&c.failed, __ATOMIC_SEQ_CST) < 5; i++)
        usleep(10 * 1000);
    assert_int_equal(__atomic_load_n(&c.failed, __ATOMIC_SEQ_CST), 5); /* written off, not held */
    assert_int_equal(c.written, 0);
    vsr_replay_unref(st); /* returns at once; the process's end waits for the writer, bounded */
    assert_int_equal(vsr_replay_wait_writers(5000), 0);
    vsr_buf_free(&b);
    vsr_buf_free(&err);
}

/* A server that accepts the connection and never answers: the writer sits
 * in its connect (bounded by libpq's 2 s) while puts arrive.  The queue
 * keeps max_queue records; a put past it is refused at once and counted. */
static void test_postgres_queue_bound(void **state)
{
    (void)state;
    static counts_t c;
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(ls >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    assert_int_equal(bind(ls, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(ls, 8), 0);
    assert_int_equal(getsockname(ls, (struct sockaddr *)&a, &alen), 0);
    vsr_replay_config_t cfg;
    vsr_replay_config_init(&cfg);
    cfg.backend = VSR_STORE_POSTGRES;
    cfg.pg_host = "127.0.0.1";
    cfg.pg_port = ntohs(a.sin_port);
    cfg.pg_database = "rr";
    cfg.pg_user = "vsr";
    cfg.max_queue = 2;
    cfg.count = count;
    cfg.count_ud = &c;
    vsr_replay_store_t *st = vsr_replay_open(&cfg, NULL);
    assert_non_null(st);
    int rc[6];
    for (int i = 0; i < 6; i++) {
        char id[8];
        snprintf(id, sizeof(id), "q%d", i);
        rc[i] = vsr_replay_put(st, vsr_slice_cstr(id), 1, VSR_SLICE_LIT("{}"), VSR_SLICE_LIT("{}"), 10);
        if (i == 0)
            usleep(300 * 1000); /* the writer takes it and waits on the silent server (2 s) */
    }
    /* the first with the writer, two queued, the rest refused at once */
    int want[6] = {VSR_OK, VSR_OK, VSR_OK, VSR_ERR_TOO_BIG, VSR_ERR_TOO_BIG, VSR_ERR_TOO_BIG};
    for (int i = 0; i < 6; i++)
        assert_int_equal(rc[i], want[i]);
    assert_int_equal(__atomic_load_n(&c.failed, __ATOMIC_SEQ_CST), 3); /* the writer is still connecting */
    uint64_t t0 = vsr_now_ms();
    vsr_replay_unref(st);
    assert_int_equal(vsr_replay_wait_writers(10000), 0);
    assert_true(vsr_now_ms() - t0 >= 1000); /* it waited for the writer's connect to give up */
    assert_int_equal(__atomic_load_n(&c.failed, __ATOMIC_SEQ_CST), 6);
    assert_int_equal(c.written, 0);
    close(ls);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_order_eviction_get_delete),
        cmocka_unit_test(test_memory_bytes_and_ttl),
        cmocka_unit_test(test_redis_unreachable),
        cmocka_unit_test(test_postgres_unreachable_and_bad_config),
        cmocka_unit_test(test_postgres_queue_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
