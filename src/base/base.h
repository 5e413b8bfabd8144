/*
 * base — the ground floor every other module stands on: return codes, byte
 * slices, bounded growable buffers, a per-request pool (arena), clocks,
 * logging and assertions.  Depends on libc only.
 *
 * Memory policy: allocation failure is fatal (vsr_malloc and friends abort
 * with a message).  Linux overcommits, so a NULL from malloc means the
 * process is already lost; failing loudly beats half-handled NULLs.
 * Every buffer that grows with input carries a cap chosen by its owner.
 */
#ifndef VSR_BASE_H
#define VSR_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* ---- return codes ------------------------------------------------------
 * 0 is success; positive codes are "not an error, but not done"; negative
 * codes are errors.  Functions document which of these they return. */
enum {
    VSR_OK = 0,
    VSR_AGAIN = 1,      /* need more input / would block */
    VSR_DECLINED = 2,   /* not mine: the next handler decides */
    VSR_PAUSED = 3,     /* a callback asked the producer to stop here */
    VSR_ERR = -1,       /* generic failure */
    VSR_ERR_NOMEM = -2,
    VSR_ERR_INVALID = -3,  /* malformed input */
    VSR_ERR_TOO_BIG = -4,  /* a limit was exceeded */
    VSR_ERR_IO = -5,
    VSR_ERR_NOT_FOUND = -6,
    VSR_EOF = -7,          /* the peer ended the stream (a TLS close_notify, say) */
};

const char *vsr_strerror(int code);

#define VSR_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define VSR_MIN(a, b) ((a) < (b) ? (a) : (b))
#define VSR_MAX(a, b) ((a) > (b) ? (a) : (b))
#define VSR_UNUSED(x) ((void)(x))

#if defined(__GNUC__)
#define VSR_LIKELY(x) __builtin_expect(!!(x), 1)
#define VSR_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define VSR_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define VSR_NORETURN __attribute__((noreturn))
#else
#define VSR_LIKELY(x) (x)
#define VSR_UNLIKELY(x) (x)
#define VSR_PRINTF(a, b)
#define VSR_NORETURN
#endif

/* ---- assertions --------------------------------------------------------
 * VSR_BUG_ON is always on: for invariants whose violation would corrupt
 * memory.  VSR_ASSERT compiles out with NDEBUG: cheap debug checks. */
VSR_NORETURN void vsr__bug(const char *file, int line, const char *expr);
#define VSR_BUG_ON(cond) \
    do { if (VSR_UNLIKELY(cond)) vsr__bug(__FILE__, __LINE__, #cond); } while (0)
#ifdef NDEBUG
#define VSR_ASSERT(cond) ((void)0)
#else
#define VSR_ASSERT(cond) VSR_BUG_ON(!(cond))
#endif

/* ---- allocation (aborts on failure, see the memory policy above) ------- */
void *vsr_malloc(size_t n);
void *vsr_calloc(size_t count, size_t n);
void *vsr_realloc(void *p, size_t n);
char *vsr_strndup(const char *s, size_t n);
char *vsr_strdup(const char *s);
void vsr_free(void *p); /* accepts NULL */

/* ---- slices: pointer + length, never NUL-terminated by contract -------- */
typedef struct {
    const char *p;
    size_t len;
} vsr_slice_t;

#define VSR_SLICE_LIT(s) ((vsr_slice_t){(s), sizeof(s) - 1})
#define VSR_SLICE_NULL ((vsr_slice_t){NULL, 0})
#define VSR_SLICE_FMT "%.*s"
#define VSR_SLICE_ARG(s) (int)(s).len, (s).p

static inline vsr_slice_t vsr_slice(const char *p, size_t len)
{
    vsr_slice_t s = {p, len};
    return s;
}
static inline vsr_slice_t vsr_slice_cstr(const char *s)
{
    return vsr_slice(s, s ? strlen(s) : 0);
}
static inline int vsr_slice_eq(vsr_slice_t a, vsr_slice_t b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}
static inline int vsr_slice_eq_cstr(vsr_slice_t a, const char *b)
{
    return vsr_slice_eq(a, vsr_slice_cstr(b));
}
/* Equality of a presented secret with a configured one (API keys, tokens)
 * in time that depends only on the longer length: no early exit on the
 * first differing byte, so timing does not reveal how much matched. */
int vsr_secret_eq(vsr_slice_t got, vsr_slice_t want);
/* ASCII case-insensitive equality (header names, tokens).  Inline for its
 * length test: most comparisons (a field name against each one an effect
 * sets) decide on the length, without a call. */
int vsr__case_eq_n(const char *a, const char *b, size_t n);
static inline int vsr_slice_case_eq(vsr_slice_t a, vsr_slice_t b)
{
    return a.len == b.len && vsr__case_eq_n(a.p, b.p, a.len);
}
int vsr__slice_case_eq_str(vsr_slice_t a, const char *b); /* the general case of the next */
/* Inline because most callers compare with a literal: its length is then
 * known at compile time and a different length decides without a call. */
static inline int vsr_slice_case_eq_cstr(vsr_slice_t a, const char *b)
{
#if defined(__GNUC__)
    if (__builtin_constant_p(strlen(b)))
        return a.len == strlen(b) && vsr_slice_case_eq(a, vsr_slice(b, a.len));
#endif
    return vsr__slice_case_eq_str(a, b);
}
int vsr_slice_starts_with(vsr_slice_t s, vsr_slice_t prefix);
vsr_slice_t vsr_slice_trim(vsr_slice_t s); /* strips SP and HTAB both ends */
/* Splits off the part before the first `sep`; *rest gets what follows it
 * (NULL slice when `sep` is absent).  Returns the head. */
vsr_slice_t vsr_slice_split(vsr_slice_t s, char sep, vsr_slice_t *rest);
/* The first occurrence of needle in hay, or NULL (memmem's contract).  For
 * short needles over streamed bytes: candidates are positions where two of
 * the needle's bytes match, sixteen positions at a time where there is SSE2. */
const char *vsr_find(const char *hay, size_t n, const char *needle, size_t k);
/* Strict unsigned decimal: digits only, no sign, no overflow past max. */
int vsr_slice_to_u64(vsr_slice_t s, uint64_t max, uint64_t *out);
/* Writes v in decimal to out (room for VSR_U64_DIGITS bytes; no NUL) and
 * returns the length.  With frac > 0 the last frac digits follow a point,
 * as printf's "%.<frac>f" shows v / 10^frac ("%.3f" of ms from µs). */
#define VSR_U64_DIGITS 32
size_t vsr_fmt_u64(char *out, uint64_t v, unsigned frac);
/* printf's "%.4f" of v, byte for byte, into out (room for VSR_U64_DIGITS
 * bytes; no NUL); returns the length.  Scores in response headers: the
 * common case is integer arithmetic, and printf itself is asked only for
 * values it could round otherwise (near a tie, huge, NaN). */
size_t vsr_fmt_fixed4(char *out, double v);

/* ---- buffers: growable bytes with a hard cap ---------------------------
 * `cap` bounds the length; appending past it returns VSR_ERR_TOO_BIG and
 * leaves the buffer unchanged.  cap 0 means SIZE_MAX (only for data whose
 * size vsr itself controls). */
typedef struct {
    char *data;
    size_t len;
    size_t alloc;
    size_t cap;
} vsr_buf_t;

void vsr_buf_init(vsr_buf_t *b, size_t cap);
void vsr_buf_free(vsr_buf_t *b);
void vsr_buf_reset(vsr_buf_t *b); /* len = 0, keeps memory */
int vsr_buf_reserve(vsr_buf_t *b, size_t extra); /* VSR_OK | VSR_ERR_TOO_BIG */
int vsr_buf_append(vsr_buf_t *b, const void *p, size_t n);
int vsr_buf_append_slice(vsr_buf_t *b, vsr_slice_t s);
int vsr_buf_append_cstr(vsr_buf_t *b, const char *s);
int vsr_buf_printf(vsr_buf_t *b, const char *fmt, ...) VSR_PRINTF(2, 3);
/* Drops the first n bytes (n <= len). */
void vsr_buf_consume(vsr_buf_t *b, size_t n);
static inline vsr_slice_t vsr_buf_slice(const vsr_buf_t *b)
{
    return vsr_slice(b->data, b->len);
}
/* Length of the valid UTF-8 sequence at s[0..n) (n >= 1), or 0 when it is
 * not one (overlong forms, surrogates, code points past U+10FFFF). */
size_t vsr_utf8_seq(const unsigned char *s, size_t n);
/* 1 when s is valid UTF-8, else 0. */
int vsr_utf8_valid(vsr_slice_t s);
/* s[0..n) written at out (room for 3n bytes) with each byte outside a valid
 * sequence replaced by U+FFFD; returns the bytes written. */
size_t vsr_utf8_repair(const char *s, size_t n, char *out);
/* Appends s as a JSON string literal (with quotes), escaping as RFC 8259.
 * JSON text is UTF-8 (RFC 8259 §8.1): each byte of s outside a valid UTF-8
 * sequence is written as U+FFFD, so what vsr writes always parses. */
int vsr_buf_append_json_string(vsr_buf_t *b, vsr_slice_t s);
/* The same literal's size in bytes, and the literal written at dst (which
 * has that many bytes); returns the end of what was written. */
size_t vsr_json_string_size(vsr_slice_t s);
char *vsr_json_string_put(char *dst, vsr_slice_t s);
extern const uint8_t vsr__json_special[256]; /* 1 for the bytes below */
/* Offset of the first byte at or after pos that a JSON string cannot hold
 * raw (the quote, a backslash, a control byte), or len: the JSON scanner's
 * string loop and the string writer's. */
static inline size_t vsr_json_find_special(const uint8_t *s, size_t pos, size_t len)
{
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i bslash = _mm_set1_epi8('\\');
    const __m128i ctl = _mm_set1_epi8(0x1f);
    /* unsigned v <= 0x1f  <=>  max(v, 0x1f) == 0x1f */
#define SPECIAL(v) \
    _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)), \
                 _mm_cmpeq_epi8(_mm_max_epu8(v, ctl), ctl))
    /* long strings (prompts) 64 bytes per test; the 16-byte loop finds where */
    while (len - pos >= 64) {
        const __m128i *p = (const __m128i *)(const void *)(s + pos);
        __m128i m = _mm_or_si128(_mm_or_si128(SPECIAL(_mm_loadu_si128(p)), SPECIAL(_mm_loadu_si128(p + 1))),
                                 _mm_or_si128(SPECIAL(_mm_loadu_si128(p + 2)), SPECIAL(_mm_loadu_si128(p + 3))));
        if (_mm_movemask_epi8(m))
            break;
        pos += 64;
    }
    while (len - pos >= 16) {
        unsigned mask = (unsigned)_mm_movemask_epi8(SPECIAL(_mm_loadu_si128((const __m128i *)(const void *)(s + pos))));
        if (mask)
            return pos + (size_t)__builtin_ctz(mask);
        pos += 16;
    }
#undef SPECIAL
#else
    const uint64_t ones = 0x0101010101010101ull;
    const uint64_t highs = 0x8080808080808080ull;
    while (len - pos >= 8) {
        uint64_t x;
        memcpy(&x, s + pos, 8);
        uint64_t xq = x ^ (ones * '"');
        uint64_t xb = x ^ (ones * '\\');
        /* Each term is the classic exact "some byte is zero / is < n"
         * test; only whether any bit survives is used, not where. */
        uint64_t hit = ((xq - ones) & ~xq) | ((xb - ones) & ~xb) | ((x - ones * 0x20) & ~x);
        if (hit & highs)
            break;
        pos += 8;
    }
#endif
    while (pos < len && !vsr__json_special[s[pos]])
        pos++;
    return pos;
}

/* ---- pool: a per-request arena -----------------------------------------
 * Everything allocated from a pool dies with vsr_pool_clear/free.  Cleanup
 * hooks run in reverse order of registration before the memory goes. */
typedef struct vsr_pool_chunk_s vsr_pool_chunk_t;
typedef struct vsr_pool_cleanup_s vsr_pool_cleanup_t;
typedef struct {
    vsr_pool_chunk_t *chunks;
    vsr_pool_cleanup_t *cleanups;
    char *cur;
    char *end;
} vsr_pool_t;

void vsr_pool_init(vsr_pool_t *pool);
void *vsr_pool_alloc(vsr_pool_t *pool, size_t n); /* 16-byte aligned */
char *vsr_pool_strndup(vsr_pool_t *pool, const char *s, size_t n); /* NUL-terminated */
vsr_slice_t vsr_pool_dup_slice(vsr_pool_t *pool, vsr_slice_t s);
void vsr_pool_on_clear(vsr_pool_t *pool, void (*fn)(void *), void *arg);
void vsr_pool_clear(vsr_pool_t *pool); /* runs cleanups, keeps the first chunk */
void vsr_pool_free(vsr_pool_t *pool);
/* Freed standard chunks stay on a per-thread list (at most 128 KiB) for
 * the next pool or block on that thread.  A thread's list is given back when
 * it ends, or earlier with this (a worker, after its last connection). */
void vsr_pool_trim_cache(void);
/* A zeroed block of n <= VSR_BLOCK_MAX bytes taken from that list, for an
 * object made and freed once per request (malloc's slower sizes otherwise);
 * vsr_block_free (NULL is fine) puts it back, on any thread. */
#define VSR_BLOCK_MAX 4000
void *vsr_block_calloc(size_t n);
void vsr_block_free(void *p);

/* ---- rbuf: refcounted receive buffers ----------------------------------
 * A socket read lands in an rbuf; body slices handed to the other side of
 * the proxy keep it alive with a reference until their write completes, so
 * relayed bytes are never copied.  Refcounts are not atomic: an rbuf lives on
 * one worker thread.  Free rbufs are kept on a per-thread list. */
#define VSR_RBUF_SIZE (64 * 1024)
typedef struct vsr_rbuf_s {
    struct vsr_rbuf_s *_next_free;
    uint32_t refs;
    char data[VSR_RBUF_SIZE];
} vsr_rbuf_t;

vsr_rbuf_t *vsr_rbuf_get(void); /* refs = 1 */
static inline void vsr_rbuf_ref(vsr_rbuf_t *b)
{
    b->refs++;
}
void vsr_rbuf_unref(vsr_rbuf_t *b); /* accepts NULL */
void vsr_rbuf_trim_cache(void);     /* frees this thread's cached rbufs */

/* ---- clocks --------------------------------------------------------------
 * vsr_now_us and vsr_now_ms read the monotonic clock.  A thread that runs an
 * event loop may cache it (vsr_clock_cache(1)): each read then returns the
 * time first read since the thread's last vsr_clock_tick, as nginx's cached
 * time does, so the ten-odd reads of one request cost one.  The loop ticks
 * before it waits for I/O and after each round of callbacks, and the hot read
 * callbacks tick on entry, so a cached time is never older than the callback
 * being run (a few µs of work), never a wait.  A thread that does not cache
 * (the default) reads the clock every time.  vsr_now_us_exact always reads:
 * for durations measured inside one callback (a signal's evaluation). */
uint64_t vsr_now_ms(void);        /* monotonic */
uint64_t vsr_now_us(void);        /* monotonic */
uint64_t vsr_now_us_exact(void);  /* monotonic, never cached */
void vsr_clock_cache(int on);     /* this thread caches its reads between ticks (1) or not (0) */
void vsr_clock_tick(void);        /* the next read on this thread reads the clock */
double vsr_wall_time(void);       /* seconds since the epoch, for logs */

/* ---- logging -------------------------------------------------------------
 * One line per call to stderr, prefixed with time, level and module.  Never
 * pass prompts, completions or credentials. */
typedef enum { VSR_LOG_DEBUG, VSR_LOG_INFO, VSR_LOG_WARN, VSR_LOG_ERROR } vsr_log_level_t;
extern vsr_log_level_t vsr_log_min_level;
void vsr_log(vsr_log_level_t lvl, const char *module, const char *fmt, ...) VSR_PRINTF(3, 4);
#define vsr_log_debug(mod, ...) \
    do { if (vsr_log_min_level <= VSR_LOG_DEBUG) vsr_log(VSR_LOG_DEBUG, mod, __VA_ARGS__); } while (0)
#define vsr_log_info(mod, ...) vsr_log(VSR_LOG_INFO, mod, __VA_ARGS__)
#define vsr_log_warn(mod, ...) vsr_log(VSR_LOG_WARN, mod, __VA_ARGS__)
#define vsr_log_error(mod, ...) vsr_log(VSR_LOG_ERROR, mod, __VA_ARGS__)

/* ---- misc ---------------------------------------------------------------- */
/* n bytes from the kernel's CSPRNG (getrandom(2), drawn in 4 KiB blocks per
 * thread, so a small request costs a copy).  Unpredictable: fit for ids
 * that grant access and for tokens.  Any thread; aborts only when the kernel
 * gives no random bytes at all (never falls back to a guessable source). */
void vsr_random_bytes(void *out, size_t n);
/* Writes a random RFC 4122 version-4 UUID (36 chars + NUL) into out: 122
 * bits of vsr_random_bytes, so one id tells nothing about the next. */
void vsr_uuid4(char out[37]);
/* ---- what the process waits for at exit (exit_wait.c) --------------------
 * Threads that must end before exit() runs its handlers (which would unload
 * OpenSSL or libpq under them) are listed here by whoever starts them: one
 * entry per kind, with the function that waits for them.  The composition
 * root waits once for the whole list, in the order it was added to, within
 * one bound.  At most VSR_EXIT_WAITS_MAX entries; any thread. */
#define VSR_EXIT_WAITS_MAX 16
/* Waits up to timeout_ms (0: only looks) and returns how many are still running. */
typedef unsigned (*vsr_exit_wait_fn)(void *arg, uint64_t timeout_ms);
/* `what` names them in the log (static text).  VSR_OK, or VSR_ERR_TOO_BIG
 * when the list is full. */
int vsr_exit_wait_add(const char *what, vsr_exit_wait_fn fn, void *arg);
void vsr_exit_wait_remove(vsr_exit_wait_fn fn, void *arg); /* the entry of (fn, arg), if any */
/* Runs the waits in order, each within what is left of timeout_ms; stops at
 * the first that leaves some running and returns their number, its `what`
 * in *busy (when busy is not NULL).  0: everything listed has ended. */
unsigned vsr_exit_wait_all(uint64_t timeout_ms, const char **busy);

/* ---- blocking sockets, for the threads that own one (exporters, clients
 * off the event loops) ---- */
/* Waits until fd has one of events (POLLIN, POLLOUT) or deadline_ms passes
 * (vsr_now_ms's clock): 0 when ready, -1 at the deadline or on an error. */
int vsr_fd_wait(int fd, short events, uint64_t deadline_ms);
/* A TCP connection to host:port (any address family, each address tried in
 * turn) made by deadline_ms: a non-blocking, close-on-exec descriptor with
 * TCP_NODELAY, or -1 (no address resolved, none connected in time). */
int vsr_tcp_dial(const char *host, const char *port, uint64_t deadline_ms);
/* Parses "300s", "1.5s", "250ms", "2m", "1h", "10us" into milliseconds.
 * VSR_OK or VSR_ERR_INVALID. */
int vsr_parse_duration_ms(vsr_slice_t s, uint64_t *out_ms);

#endif /* VSR_BASE_H */
