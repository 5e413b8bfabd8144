/*
 * backoff.c — how long to wait before a retry: Envoy's jittered exponential
 * back-off, and an upstream's Retry-After (ref §5.3).
 */
#include <time.h>

#include "policy.h"

uint64_t vsr__backoff_ms(const vsr_policy_t *p, unsigned n, vsr_rng_t *rng)
{
    uint64_t max = p->backoff_max_ms;
    uint64_t ceiling = p->backoff_base_ms;
    if (ceiling == 0 || max == 0)
        return 0;
    /* Doubling stops at the cap, so neither n nor the product can overflow. */
    for (unsigned i = 1; i < n && ceiling < max; i++)
        ceiling = ceiling > UINT64_MAX / 2 ? UINT64_MAX : ceiling * 2;
    if (ceiling > max)
        ceiling = max;
    return vsr__rng_below(rng, ceiling);
}

/* ---- Retry-After ---- */

typedef struct {
    const char *p;
    const char *end;
} cursor_t;

static int lit(cursor_t *c, const char *s)
{
    size_t n = strlen(s);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, s, n) != 0)
        return 0;
    c->p += n;
    return 1;
}

/* Exactly `width` digits. */
static int digits(cursor_t *c, int width, int *out)
{
    if (c->end - c->p < width)
        return 0;
    int v = 0;
    for (int i = 0; i < width; i++) {
        unsigned d = (unsigned char)c->p[i] - '0';
        if (d > 9)
            return 0;
        v = v * 10 + (int)d;
    }
    c->p += width;
    *out = v;
    return 1;
}

static const char *const months[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
static const char *const days_short[7] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
static const char *const days_long[7] = {"Monday", "Tuesday", "Wednesday", "Thursday",
                                         "Friday", "Saturday", "Sunday"};

static int month(cursor_t *c, int *out)
{
    for (int i = 0; i < 12; i++)
        if (lit(c, months[i])) {
            *out = i;
            return 1;
        }
    return 0;
}

static int day_name(cursor_t *c, const char *const *names)
{
    for (int i = 0; i < 7; i++)
        if (lit(c, names[i]))
            return 1;
    return 0;
}

/* "hh:mm:ss" */
static int clock_of_day(cursor_t *c, struct tm *tm)
{
    return digits(c, 2, &tm->tm_hour) && lit(c, ":") && digits(c, 2, &tm->tm_min) && lit(c, ":") &&
           digits(c, 2, &tm->tm_sec);
}

/* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
static int imf_fixdate(cursor_t c, struct tm *tm)
{
    return day_name(&c, days_short) && lit(&c, ", ") && digits(&c, 2, &tm->tm_mday) && lit(&c, " ") &&
           month(&c, &tm->tm_mon) && lit(&c, " ") && digits(&c, 4, &tm->tm_year) && lit(&c, " ") &&
           clock_of_day(&c, tm) && lit(&c, " GMT") && c.p == c.end;
}

/* obsolete RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT" (the year gets its century later) */
static int rfc850_date(cursor_t c, struct tm *tm)
{
    return day_name(&c, days_long) && lit(&c, ", ") && digits(&c, 2, &tm->tm_mday) && lit(&c, "-") &&
           month(&c, &tm->tm_mon) && lit(&c, "-") && digits(&c, 2, &tm->tm_year) && lit(&c, " ") &&
           clock_of_day(&c, tm) && lit(&c, " GMT") && c.p == c.end;
}

/* obsolete asctime: "Sun Nov  6 08:49:37 1994" */
static int asctime_date(cursor_t c, struct tm *tm)
{
    if (!(day_name(&c, days_short) && lit(&c, " ") && month(&c, &tm->tm_mon) && lit(&c, " ")))
        return 0;
    if (lit(&c, " ")) {
        if (!digits(&c, 1, &tm->tm_mday))
            return 0;
    } else if (!digits(&c, 2, &tm->tm_mday)) {
        return 0;
    }
    return lit(&c, " ") && clock_of_day(&c, tm) && lit(&c, " ") && digits(&c, 4, &tm->tm_year) && c.p == c.end;
}

static int leap(int year)
{
    return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
}

/* An HTTP-date (RFC 9110 §5.6.7) as seconds since the epoch. */
static int http_date(vsr_slice_t s, double now_epoch, int64_t *out)
{
    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    cursor_t c = {s.p, s.p + s.len};
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    if (imf_fixdate(c, &tm) || asctime_date(c, &tm)) {
        /* four-digit year as written */
    } else if (rfc850_date(c, &tm)) {
        /* A two-digit year more than 50 years ahead is in the past century. */
        time_t now = (time_t)now_epoch;
        struct tm cur;
        if (!gmtime_r(&now, &cur))
            return VSR_ERR_INVALID;
        int year_now = cur.tm_year + 1900;
        int year = year_now - year_now % 100 + tm.tm_year;
        if (year > year_now + 50)
            year -= 100;
        tm.tm_year = year;
    } else {
        return VSR_ERR_INVALID;
    }
    int year = tm.tm_year;
    int dim = mdays[tm.tm_mon] + (tm.tm_mon == 1 && leap(year));
    if (tm.tm_mday < 1 || tm.tm_mday > dim || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
        return VSR_ERR_INVALID;
    tm.tm_year = year - 1900;
    /* Every field is in range, so timegm cannot fail (-1 is 1969's last second). */
    *out = (int64_t)timegm(&tm);
    return VSR_OK;
}

int vsr__retry_after_ms(vsr_slice_t value, double now_epoch, uint64_t max_ms, vsr_rng_t *rng, uint64_t *out)
{
    vsr_slice_t v = vsr_slice_trim(value);
    uint64_t ms;
    uint64_t secs;
    int rc = vsr_slice_to_u64(v, UINT64_MAX, &secs);
    if (rc == VSR_OK) {
        ms = secs > UINT64_MAX / 1000 ? UINT64_MAX : secs * 1000;
    } else if (rc == VSR_ERR_TOO_BIG) {
        ms = UINT64_MAX; /* all digits, just huge: the cap decides */
    } else {
        int64_t when;
        if (http_date(v, now_epoch, &when) != VSR_OK)
            return VSR_ERR_INVALID;
        double delta = ((double)when - now_epoch) * 1000.0;
        if (!(delta > 0))
            ms = 0;
        else if (delta >= 18446744073709551615.0)
            ms = UINT64_MAX;
        else
            ms = (uint64_t)delta;
    }
    if (ms > max_ms)
        return VSR_DECLINED;
    /* Jitter spreads the retries of clients told the same instant. */
    if (ms / 2 > 0)
        ms += vsr__rng_below(rng, ms / 2);
    *out = ms;
    return VSR_OK;
}
