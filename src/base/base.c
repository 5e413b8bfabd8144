/* base.c — allocation, slices, errors, clocks, logging, misc helpers. */
#include "base/base.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

const char *vsr_strerror(int code)
{
    switch (code) {
    case VSR_OK: return "ok";
    case VSR_AGAIN: return "again";
    case VSR_DECLINED: return "declined";
    case VSR_PAUSED: return "paused";
    case VSR_ERR: return "error";
    case VSR_ERR_NOMEM: return "out of memory";
    case VSR_ERR_INVALID: return "invalid input";
    case VSR_ERR_TOO_BIG: return "limit exceeded";
    case VSR_ERR_IO: return "i/o error";
    case VSR_ERR_NOT_FOUND: return "not found";
    case VSR_EOF: return "end of stream";
    default: return "unknown error";
    }
}

void vsr__bug(const char *file, int line, const char *expr)
{
    fprintf(stderr, "vsr: BUG at %s:%d: %s\n", file, line, expr);
    abort();
}

static VSR_NORETURN void oom(size_t n)
{
    fprintf(stderr, "vsr: out of memory allocating %zu bytes\n", n);
    abort();
}

void *vsr_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        oom(n);
    return p;
}

void *vsr_calloc(size_t count, size_t n)
{
    void *p = calloc(count ? count : 1, n ? n : 1);
    if (p == NULL)
        oom(count * n);
    return p;
}

void *vsr_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL)
        oom(n);
    return q;
}

char *vsr_strndup(const char *s, size_t n)
{
    char *d = vsr_malloc(n + 1);
    if (n)
        memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *vsr_strdup(const char *s)
{
    return vsr_strndup(s, strlen(s));
}

void vsr_free(void *p)
{
    free(p);
}

/* ---- slices ---- */

static inline int lower(int c)
{
    return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

int vsr_secret_eq(vsr_slice_t got, vsr_slice_t want)
{
    size_t n = VSR_MAX(got.len, want.len);
    unsigned diff = (unsigned)(got.len ^ want.len);
    for (size_t i = 0; i < n; i++) {
        unsigned char x = i < got.len ? (unsigned char)got.p[i] : 0;
        unsigned char y = i < want.len ? (unsigned char)want.p[i] : 0;
        diff |= (unsigned)(x ^ y);
    }
    return diff == 0;
}

int vsr__case_eq_n(const char *a, const char *b, size_t n)
{
    /* names mostly arrive in the case they are compared with: equal runs
     * go eight bytes at a time, folding only where bytes differ */
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y)
            break;
    }
    for (; i < n; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if (x != y && lower(x) != lower(y))
            return 0;
    }
    return 1;
}

int vsr__slice_case_eq_str(vsr_slice_t a, const char *b)
{
    /* walks b once and stops at the first difference: no strlen (header
     * lookups call this for every field of every message) */
    for (size_t i = 0; i < a.len; i++)
        if (b[i] == '\0' || lower((unsigned char)a.p[i]) != lower((unsigned char)b[i]))
            return 0;
    return b[a.len] == '\0';
}

int vsr_slice_starts_with(vsr_slice_t s, vsr_slice_t prefix)
{
    return s.len >= prefix.len && (prefix.len == 0 || memcmp(s.p, prefix.p, prefix.len) == 0);
}

vsr_slice_t vsr_slice_trim(vsr_slice_t s)
{
    while (s.len && (s.p[0] == ' ' || s.p[0] == '\t')) {
        s.p++;
        s.len--;
    }
    while (s.len && (s.p[s.len - 1] == ' ' || s.p[s.len - 1] == '\t'))
        s.len--;
    return s;
}

vsr_slice_t vsr_slice_split(vsr_slice_t s, char sep, vsr_slice_t *rest)
{
    const char *hit = s.len ? memchr(s.p, sep, s.len) : NULL;
    if (hit == NULL) {
        if (rest)
            *rest = VSR_SLICE_NULL;
        return s;
    }
    if (rest)
        *rest = vsr_slice(hit + 1, s.len - (size_t)(hit + 1 - s.p));
    return vsr_slice(s.p, (size_t)(hit - s.p));
}

size_t vsr_fmt_u64(char *out, uint64_t v, unsigned frac)
{
    char tmp[VSR_U64_DIGITS];
    size_t n = 0;
    if (frac > 10)
        frac = 10;
    do {
        if (frac && n == frac)
            tmp[n++] = '.';
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v || (frac && n <= frac));
    for (size_t i = 0; i < n; i++)
        out[i] = tmp[n - 1 - i];
    return n;
}

const char *vsr_find(const char *hay, size_t n, const char *needle, size_t k)
{
    if (k == 0)
        return hay;
    if (k > n)
        return NULL;
    size_t i = 0;
#if defined(__SSE2__)
    if (k >= 2) {
        /* two bytes of the needle filter: inside it when it is 4 or longer,
         * since delimiters ("...") repeat all over JSON */
        size_t x = k >= 4 ? 1 : 0, y = k >= 4 ? k - 2 : k - 1;
        const __m128i bx = _mm_set1_epi8(needle[x]), by = _mm_set1_epi8(needle[y]);
        for (; i + k + 15 <= n; i += 16) {
            __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(hay + i + x));
            __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(hay + i + y));
            unsigned m = (unsigned)_mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(a, bx), _mm_cmpeq_epi8(b, by)));
            for (; m; m &= m - 1) {
                size_t at = i + (size_t)__builtin_ctz(m);
                if (memcmp(hay + at, needle, k) == 0)
                    return hay + at;
            }
        }
    }
#endif
    for (; i + k <= n; i++)
        if (hay[i] == needle[0] && memcmp(hay + i + 1, needle + 1, k - 1) == 0)
            return hay + i;
    return NULL;
}

size_t vsr_fmt_fixed4(char *out, double v)
{
    double a = fabs(v), t = a * 10000.0, r = nearbyint(t);
    /* t carries one rounding of its own (below 1e-6 under 1e5): away from
     * a tie by more than that, the nearest integer is the one printf
     * rounds the exact value to; nearer, or out of range, printf decides */
    if (!(a < 1e5) || fabs(t - r) > 0.5 - 1e-6) {
        char tmp[400];
        int n = snprintf(tmp, sizeof(tmp), "%.4f", v);
        n = n < 0 ? 0 : n > VSR_U64_DIGITS ? VSR_U64_DIGITS : n;
        memcpy(out, tmp, (size_t)n);
        return (size_t)n;
    }
    size_t n = 0;
    if (signbit(v))
        out[n++] = '-'; /* as printf: -0.0000 for a negative zero or a value that rounds to it */
    return n + vsr_fmt_u64(out + n, (uint64_t)r, 4);
}

int vsr_slice_to_u64(vsr_slice_t s, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (s.len == 0)
        return VSR_ERR_INVALID;
    for (size_t i = 0; i < s.len; i++) {
        unsigned d = (unsigned char)s.p[i] - '0';
        if (d > 9)
            return VSR_ERR_INVALID;
        if (v > (max - d) / 10)
            return VSR_ERR_TOO_BIG;
        v = v * 10 + d;
    }
    *out = v;
    return VSR_OK;
}

/* ---- clocks ---- */

static _Thread_local struct {
    uint64_t us;
    unsigned char on, valid;
} clock_tls;

uint64_t vsr_now_us_exact(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

uint64_t vsr_now_us(void)
{
    if (clock_tls.valid)
        return clock_tls.us;
    uint64_t us = vsr_now_us_exact();
    if (clock_tls.on) {
        clock_tls.us = us;
        clock_tls.valid = 1;
    }
    return us;
}

void vsr_clock_cache(int on)
{
    clock_tls.on = on != 0;
    clock_tls.valid = 0;
}

void vsr_clock_tick(void)
{
    clock_tls.valid = 0;
}

uint64_t vsr_now_ms(void)
{
    return vsr_now_us() / 1000u;
}

double vsr_wall_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- logging ---- */

vsr_log_level_t vsr_log_min_level = VSR_LOG_INFO;

void vsr_log(vsr_log_level_t lvl, const char *module, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    char line[2048];
    if (lvl < vsr_log_min_level)
        return;
    double now = vsr_wall_time();
    time_t secs = (time_t)now;
    struct tm tm;
    gmtime_r(&secs, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ %s [%s] ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     (int)((now - (double)secs) * 1000), names[lvl], module);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : VSR_MIN((size_t)m, sizeof(line) - (size_t)n - 2));
    line[len++] = '\n';
    /* one write(2) per line keeps lines from different threads whole */
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

/* ---- misc ---- */

/* Random bytes from the kernel's CSPRNG (getrandom(2)), drawn in blocks
 * into a per-thread buffer so that an id costs one syscall in RNG_BLOCK/16.
 * Bytes are handed out once and wiped as they go; a forked child drops the
 * buffer it inherited (its parent hands out the same bytes). */
#define RNG_BLOCK 4096

static _Thread_local struct {
    unsigned char buf[RNG_BLOCK];
    size_t left; /* unused bytes, at the end of buf; the ones before are wiped */
    int registered;
} rng;

static void rng_forget(void)
{
    memset(rng.buf, 0, sizeof(rng.buf));
    rng.left = 0;
}

static pthread_once_t rng_once = PTHREAD_ONCE_INIT;

static void rng_register(void)
{
    /* only the forking thread lives on in the child: its buffer is the one to drop */
    pthread_atfork(NULL, NULL, rng_forget);
}

/* Fills p with n bytes of the kernel's CSPRNG; never a weaker source. */
static void kernel_random(unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && errno == ENOSYS) { /* a kernel before 3.17 */
            int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
            r = fd < 0 ? -1 : read(fd, p, n);
            if (fd >= 0)
                close(fd);
        }
        if (r <= 0) {
            /* an id or a token must not come from a guessable source */
            fprintf(stderr, "vsr: no random bytes from the kernel: %s\n", strerror(errno));
            abort();
        }
        p += r;
        n -= (size_t)r;
    }
}

void vsr_random_bytes(void *out, size_t n)
{
    unsigned char *o = out;
    if (VSR_UNLIKELY(!rng.registered)) {
        pthread_once(&rng_once, rng_register);
        rng.registered = 1;
    }
    if (n > RNG_BLOCK / 4) { /* a large request goes straight to the kernel */
        kernel_random(o, n);
        return;
    }
    while (n > 0) {
        if (rng.left == 0) {
            kernel_random(rng.buf, RNG_BLOCK);
            rng.left = RNG_BLOCK;
        }
        size_t take = VSR_MIN(n, rng.left);
        unsigned char *from = rng.buf + RNG_BLOCK - rng.left;
        memcpy(o, from, take);
        memset(from, 0, take); /* handed out once */
        rng.left -= take;
        o += take;
        n -= take;
    }
}

void vsr_uuid4(char out[37])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char b[16];
    vsr_random_bytes(b, sizeof(b));
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40);
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80);
    int j = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[j++] = '-';
        out[j++] = hex[b[i] >> 4];
        out[j++] = hex[b[i] & 15];
    }
    out[j] = '\0';
}

int vsr_parse_duration_ms(vsr_slice_t s, uint64_t *out_ms)
{
    size_t i = 0;
    double v = 0, frac = 0.1;
    int digits = 0, dot = 0;
    while (i < s.len && ((s.p[i] >= '0' && s.p[i] <= '9') || s.p[i] == '.')) {
        if (s.p[i] == '.') {
            if (dot++)
                return VSR_ERR_INVALID;
        } else if (dot) {
            v += (s.p[i] - '0') * frac;
            frac /= 10;
            digits++;
        } else {
            v = v * 10 + (s.p[i] - '0');
            digits++;
        }
        i++;
    }
    if (!digits || v > 1e12)
        return VSR_ERR_INVALID;
    vsr_slice_t unit = vsr_slice(s.p + i, s.len - i);
    double mult;
    if (vsr_slice_eq_cstr(unit, "ms"))
        mult = 1;
    else if (vsr_slice_eq_cstr(unit, "s"))
        mult = 1000;
    else if (vsr_slice_eq_cstr(unit, "m"))
        mult = 60000;
    else if (vsr_slice_eq_cstr(unit, "h"))
        mult = 3600000;
    else if (vsr_slice_eq_cstr(unit, "us"))
        mult = 0.001;
    else
        return VSR_ERR_INVALID;
    *out_ms = (uint64_t)(v * mult + 0.5);
    return VSR_OK;
}

/* ---- blocking sockets ---- */

int vsr_fd_wait(int fd, short events, uint64_t deadline_ms)
{
    for (;;) {
        uint64_t now = vsr_now_ms();
        if (now >= deadline_ms)
            return -1;
        struct pollfd pfd = {.fd = fd, .events = events};
        int r = poll(&pfd, 1, (int)VSR_MIN(deadline_ms - now, (uint64_t)INT32_MAX));
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

int vsr_tcp_dial(const char *host, const char *port, uint64_t deadline_ms)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, port, &hints, &res) != 0 || res == NULL)
        return -1;
    int fd = -1;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
            int err = 0;
            socklen_t el = sizeof(err);
            if (errno != EINPROGRESS || vsr_fd_wait(fd, POLLOUT, deadline_ms) != 0 ||
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
                close(fd);
                fd = -1;
            }
        }
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    return fd;
}
