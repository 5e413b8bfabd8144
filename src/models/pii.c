/* pii.c — the personal-data detector (pii.h).  One pass over word starts;
 * each scanner is a small hand-written matcher bounded by VSR_PII_MAX_SPAN
 * and returns the end of its match and a score (0 for no match). */
#include <stdlib.h>
#include <string.h>

#include "models/pii.h"
#include "pii_lists.h"

typedef struct {
    const unsigned char *s;
    size_t len;
    size_t lim; /* scan limit for the current word start */
} scan_t;

typedef struct {
    size_t end;
    float score;
} match_t;

static const char *const TYPE_NAMES[VSR_PII_N_TYPES] = {
    "EMAIL_ADDRESS", "URL",     "IBAN_CODE",    "CREDIT_CARD", "US_SSN", "IP_ADDRESS",
    "PHONE_NUMBER", "STREET_ADDRESS", "DATE_TIME", "ORGANIZATION", "PERSON", "DOMAIN_NAME"};

const char *vsr_pii_type_name(vsr_pii_type_t type)
{
    return (unsigned)type < VSR_PII_N_TYPES ? TYPE_NAMES[type] : NULL;
}

int vsr_pii_type_parse(const char *name, size_t len, vsr_pii_type_t *out)
{
    for (int t = 0; t < VSR_PII_N_TYPES; t++)
        if (strlen(TYPE_NAMES[t]) == len && memcmp(TYPE_NAMES[t], name, len) == 0) {
            *out = (vsr_pii_type_t)t;
            return VSR_OK;
        }
    return VSR_ERR_NOT_FOUND;
}

/* ---- character classes (ASCII; bytes >= 0x80 are letters) ---- */
static int is_digit(int c) { return c >= '0' && c <= '9'; }
static int is_upper(int c) { return c >= 'A' && c <= 'Z'; }
static int is_lower(int c) { return c >= 'a' && c <= 'z'; }
static int is_alpha(int c) { return is_upper(c) || is_lower(c) || c >= 0x80; }
static int is_alnum(int c) { return is_alpha(c) || is_digit(c); }
static int is_hex(int c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static int lower(int c) { return is_upper(c) ? c + 32 : c; }

static int at(const scan_t *sc, size_t i) { return i < sc->lim ? sc->s[i] : -1; }

/* c (a byte, or -1 past the end) is one of the ASCII characters of set */
static int one_of(int c, const char *set) { return c > 0 && c < 0x80 && strchr(set, c) != NULL; }

/* a UTF-8 upper-case letter of Latin-1 Supplement or Latin Extended-A */
static int utf8_upper_at(const scan_t *sc, size_t i)
{
    int c = at(sc, i), d = at(sc, i + 1);
    if (c == 0xC3 && d >= 0x80 && d <= 0x9E && d != 0x97)
        return 1;
    if ((c == 0xC4 || c == 0xC5) && d >= 0x80 && d <= 0xBF && (d & 1) == 0)
        return 1;
    return 0;
}

/* 1 when the UTF-8 sequence at i is punctuation or a symbol rather than a
 * letter: Latin-1 symbols (« » ° ·), general punctuation (– — ‘ ’ “ ” …),
 * CJK punctuation (、 。 「 」), fullwidth forms (： ，) */
static int utf8_punct_at(const scan_t *sc, size_t i)
{
    int c = at(sc, i), d = at(sc, i + 1), e = at(sc, i + 2);
    if (c == 0xC2)
        return d >= 0x80 && d <= 0xBF;
    if (c == 0xE2)
        return d == 0x80 || d == 0x81;
    if (c == 0xE3)
        return d == 0x80;
    if (c == 0xEF && d == 0xBC)
        return e >= 0x80 && e <= 0x8F;
    if (c == 0xEF && d == 0xBD)
        return e >= 0x9B;
    return 0;
}

/* ---- gazetteers ---- */
static int cmp_word(const char *w, const unsigned char *s, size_t n)
{
    int r = strncmp(w, (const char *)s, n);
    if (r)
        return r;
    return w[n] ? 1 : 0;
}

static int in_list(const char *const *list, size_t n, const unsigned char *s, size_t len)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int r = cmp_word(list[mid], s, len);
        if (r == 0)
            return 1;
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return 0;
}

/* exact match against a short unsorted list */
static int in_small(const char *const *list, const unsigned char *s, size_t len)
{
    if (len == 0)
        return 0;
    for (; *list; list++)
        if ((unsigned char)(*list)[0] == s[0] && strlen(*list) == len && memcmp(*list, s, len) == 0)
            return 1;
    return 0;
}

/* capitalised words that are never a name */
static const char *const STOP_CAPS[] = {
    "The", "This", "That", "These", "Those", "There", "Then", "They", "Their", "We", "Our", "You", "Your", "He",
    "She", "It", "Its", "His", "Her", "My", "Me", "I", "A", "An", "In", "On", "At", "For", "With", "From", "To",
    "By", "Of", "And", "Or", "But", "If", "So", "As", "Is", "Are", "Was", "Be", "Do", "Does", "Did", "Can",
    "Could", "Would", "Should", "May", "Might", "Must", "Will", "Shall", "Not", "No", "Yes", "What", "Why",
    "How", "Who", "Whom", "Where", "When", "Which", "While", "Please", "Thanks", "Thank", "Hello", "Hi", "Hey",
    "Dear", "Sir", "Madam", "Team", "All", "Everyone", "Customer", "Support", "Manager", "Hiring", "Sales",
    "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday", "January", "February",
    "March", "April", "June", "July", "August", "September", "October", "November", "December", "Here",
    "Also", "Just", "Now", "Today", "Tomorrow", "Yesterday", "Let", "Write", "Explain", "Summarize", "Give",
    "Make", "Show", "Tell", "Find", "Help", "Create", "List", "Use", "Add", "Fix", "Translate", "Draft", "Some",
    "Any", "Each", "Every", "Other", "New", "Old", "First", "Last", "Next", "Best", "Regards", "Sincerely",
    "Cheers", "Kind", "Warm", "Python", "Java", "JavaScript", "TypeScript", "Rust", "Linux", "Windows", "Mac",
    "Docker", "Kubernetes", "API", "JSON", "HTTP", "SQL", "README", "Street", "Avenue", "Road", "Inc", "LLC",
    "Ltd", "University", "College", "School", "Hospital", "Bank", "Group", "Company", "Department", "Office",
    "Chapter", "Section", "Figure", "Table", "Version", "Note", "Error", "Warning", "True", "False", "None",
    "Null", "OK", "Okay", "Sure", "Good", "Great", "Well", "Oh", "Yeah", "After", "Before", "During", "About",
    "Over", "Under", "Into", "Between", "Against", "Without", "Within", "Through", "Since", "Until", "Because",
    "Although", "However", "Therefore", "Meanwhile", "Again", "Maybe", "Perhaps", "Only", "Even", "Still",
    "Very", "Much", "Many", "More", "Most", "Few", "Less", "Both", "Either", "Neither", "Said", "Says",
    "Christmas", "Easter", "English", "French", "German", "Spanish", "Chinese", "Japanese", "European",
    "American", "British", "North", "South", "East", "West", "Central", "United", "States", "Kingdom",
    "Mr", "Mrs", "Ms", "Dr", "Prof", "Mx", "Name", "Date", "Age", "City", "Address", "Phone", "Email", "Title", "Country", "Zip", "Gender",
    "Professor", "Doctor", "President", "Minister", "King", "Queen", "Lord", "Lady", "Saint", NULL};

/* ---- cue words before a candidate ---- */

/* 1 when one of cues (lower case, may contain spaces) ends within the
 * VSR_PII_CONTEXT bytes before pos, starting at a word boundary */
static int cue_before(const scan_t *sc, size_t pos, const char *const *cues)
{
    size_t from = pos > VSR_PII_CONTEXT ? pos - VSR_PII_CONTEXT : 0;
    for (const char *const *c = cues; *c; c++) {
        size_t n = strlen(*c);
        for (size_t i = from; i + n <= pos; i++) {
            if (lower(sc->s[i]) != (unsigned char)(*c)[0] || (i > 0 && is_alnum(sc->s[i - 1])))
                continue;
            size_t k = 0;
            while (k < n && lower(sc->s[i + k]) == (unsigned char)(*c)[k])
                k++;
            if (k == n && (i + n == pos || !is_alnum(sc->s[i + n])))
                return 1;
        }
    }
    return 0;
}

/* 1 when one of cues ends right before pos: only spaces and ':' ',' '"'
 * (at most four bytes) between */
static int cue_adjacent(const scan_t *sc, size_t pos, const char *const *cues)
{
    size_t e = pos;
    while (e > 0 && pos - e < 4 && one_of(sc->s[e - 1], " \t:,\""))
        e--;
    for (const char *const *c = cues; *c; c++) {
        size_t n = strlen(*c);
        if (n > e || (e - n > 0 && is_alnum(sc->s[e - n - 1])))
            continue;
        size_t k = 0;
        while (k < n && lower(sc->s[e - n + k]) == (unsigned char)(*c)[k])
            k++;
        if (k == n)
            return 1;
    }
    return 0;
}

/* the word right before pos (skipping spaces and one punctuation mark), lower-cased, compared to w */
static int word_before_is(const scan_t *sc, size_t pos, const char *const *words)
{
    size_t e = pos;
    while (e > 0 && (sc->s[e - 1] == ' ' || sc->s[e - 1] == '\t'))
        e--;
    if (e > 0 && (sc->s[e - 1] == ':' || sc->s[e - 1] == ',' || sc->s[e - 1] == '.'))
        e--;
    size_t b = e;
    while (b > 0 && (is_alpha(sc->s[b - 1]) || (sc->s[b - 1] == '\'' && b > 1 && is_alpha(sc->s[b - 2]))) &&
           e - b < 24)
        b--;
    if (b == e)
        return 0;
    for (; *words; words++) {
        size_t n = strlen(*words);
        if (n != e - b)
            continue;
        size_t k = 0;
        while (k < n && lower(sc->s[b + k]) == (unsigned char)(*words)[k])
            k++;
        if (k == n)
            return 1;
    }
    return 0;
}

static float clampf(float x) { return x < 0 ? 0 : x > 0.99f ? 0.99f : x; }

/* the match may not run into a longer token: next byte is not a letter or
 * digit, and not "." or "-" followed by one */
static int clean_end(const scan_t *sc, size_t e)
{
    int c = at(sc, e);
    if (c >= 0 && is_alnum(c) && !utf8_punct_at(sc, e))
        return 0;
    if ((c == '.' || c == '-' || c == ',' || c == '/' || c == ':') && at(sc, e + 1) >= 0 && is_digit(at(sc, e + 1)))
        return 0;
    if (c == '@' || c == '_')
        return 0;
    return 1;
}

/* ---- EMAIL_ADDRESS ---- */
static int email_local(int c)
{
    return (is_alnum(c) && c < 0x80) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-';
}

/* a domain at i: labels of [A-Za-z0-9-] joined by '.', the last alphabetic;
 * returns its end or 0, *labels set */
static size_t domain_at(const scan_t *sc, size_t i, int *labels, size_t *last_label)
{
    size_t p = i, end = 0;
    int n = 0;
    for (;;) {
        size_t b = p;
        int alpha_only = 1;
        while (at(sc, p) >= 0 && (is_alnum(at(sc, p)) || at(sc, p) == '-') && at(sc, p) < 0x80) {
            if (!is_alpha(at(sc, p)))
                alpha_only = 0;
            p++;
        }
        if (at(sc, p) >= 0x80 && !utf8_punct_at(sc, p))
            return 0; /* an internationalised label: not matched */
        if (p == b || p - b > 63 || sc->s[b] == '-' || sc->s[p - 1] == '-')
            break;
        n++;
        if (n >= 2 && alpha_only && p - b >= 2) {
            end = p;
            *last_label = b;
            *labels = n;
        }
        if (at(sc, p) == '.' && at(sc, p + 1) >= 0 && is_alnum(at(sc, p + 1)))
            p++;
        else
            break;
    }
    return end;
}

static match_t scan_email(const scan_t *sc, size_t i)
{
    match_t m = {0, 0};
    size_t p = i;
    while (at(sc, p) >= 0 && email_local(at(sc, p)) && p - i <= 64)
        p++;
    if (at(sc, p) != '@' || p == i || sc->s[p - 1] == '.' || sc->s[i] == '.')
        return m;
    int labels = 0;
    size_t last = 0;
    size_t e = domain_at(sc, p + 1, &labels, &last);
    if (!e || !clean_end(sc, e))
        return m;
    m.end = e;
    m.score = 0.95f;
    return m;
}

/* ---- URL ---- */
static match_t scan_url(const scan_t *sc, size_t i)
{
    match_t m = {0, 0};
    static const char *const schemes[] = {"https://", "http://", "ftp://", "www.", NULL};
    size_t p = 0;
    for (const char *const *s = schemes; *s; s++) {
        size_t n = strlen(*s), k = 0;
        while (k < n && lower(at(sc, i + k)) == (*s)[k])
            k++;
        if (k == n) {
            p = i + n;
            break;
        }
    }
    if (!p)
        return m;
    int labels = 0;
    size_t last = 0;
    size_t e = domain_at(sc, p, &labels, &last);
    if (!e) {
        /* http://localhost:8080, http://10.0.0.1 */
        while (at(sc, p) >= 0 && (is_alnum(at(sc, p)) || at(sc, p) == '.' || at(sc, p) == '-'))
            p++;
        e = p;
        if (e == i)
            return m;
    }
    p = e;
    while (at(sc, p) > ' ' && at(sc, p) != '"' && at(sc, p) != '<' && at(sc, p) != '>' && at(sc, p) != '`')
        p++;
    while (p > e && one_of(sc->s[p - 1], ".,;:!?)]}'"))
        p--;
    m.end = p;
    m.score = 0.6f;
    return m;
}

/* ---- DOMAIN_NAME ---- */
static const char *const TLDS[] = {
    "com", "net", "org", "edu", "gov", "io", "co", "ai", "dev", "app", "info", "biz", "us", "uk", "ca", "au",
    "de", "fr", "es", "it", "nl", "se", "no", "dk", "fi", "ch", "at", "be", "pl", "eu", "jp", "cn", "in",
    "br", "ru", "mx", "nz", "ie", "za", "kr", "sg", "hk", "tw", "tv", "xyz", "online", "site", "tech",
    "cloud", "shop", "store", "blog", "news", "org.uk", NULL};

/* receivers of method calls and modules that look like domains in code */
static const char *const CODE_HEADS[] = {"self", "this", "os", "np", "pd", "df", "sys", "re", "obj", "cls",
                                         "ctx", "req", "res", "app", "config", "data", "math", "torch", "tf",
                                         "plt", "json", "args", "opts", "item", "user", "model", "client",
                                         "server", "window", "document", "console", "module", "exports", NULL};

static match_t scan_domain(const scan_t *sc, size_t i)
{
    match_t m = {0, 0};
    if (!is_alnum(at(sc, i)))
        return m;
    int labels = 0;
    size_t last = 0;
    size_t e = domain_at(sc, i, &labels, &last);
    if (!e || !clean_end(sc, e) || at(sc, e) == '(' || at(sc, e) == '[')
        return m;
    if (!in_small(TLDS, sc->s + last, e - last))
        return m;
    size_t first_end = i;
    while (sc->s[first_end] != '.')
        first_end++;
    for (size_t k = i; k < first_end; k++)
        if (is_upper(sc->s[k]) && k > i)
            return m; /* camelCase.member */
    if (in_small(CODE_HEADS, sc->s + i, first_end - i))
        return m;
    m.end = e;
    m.score = labels >= 3 ? 0.7f : 0.6f;
    static const char *const cues[] = {"visit", "site", "website", "domain", "go to", "at", "on", "from", NULL};
    if (cue_before(sc, i, cues))
        m.score += 0.15f;
    return m;
}

/* ---- IP_ADDRESS ---- */
static size_t ipv4_at(const scan_t *sc, size_t i)
{
    size_t p = i;
    for (int part = 0; part < 4; part++) {
        if (part && at(sc, p++) != '.')
            return 0;
        size_t b = p;
        unsigned v = 0;
        while (at(sc, p) >= 0 && is_digit(at(sc, p)) && p - b < 4)
            v = v * 10 + (unsigned)(sc->s[p++] - '0');
        if (p == b || p - b > 3 || v > 255 || (p - b > 1 && sc->s[b] == '0'))
            return 0;
    }
    return p;
}

static size_t ipv6_at(const scan_t *sc, size_t i)
{
    size_t p = i, end = 0;
    int groups = 0, dbl = 0, digits = 0;
    if (at(sc, p) == ':' && at(sc, p + 1) == ':') {
        dbl = 1;
        p += 2;
        end = p;
    }
    while (groups < 8) {
        size_t b = p;
        while (at(sc, p) >= 0 && is_hex(at(sc, p)) && p - b < 5) {
            if (is_digit(at(sc, p)))
                digits++;
            p++;
        }
        if (p == b)
            break;
        if (p - b > 4)
            return 0;
        if (at(sc, p) == '.' && groups <= 6) { /* ::ffff:192.0.2.1 */
            size_t e4 = ipv4_at(sc, b);
            if (e4) {
                groups += 2;
                end = e4;
                p = e4;
                digits++;
                break;
            }
        }
        groups++;
        end = p;
        if (at(sc, p) == ':' && at(sc, p + 1) == ':') {
            if (dbl)
                return 0;
            dbl = 1;
            p += 2;
            end = p;
        } else if (at(sc, p) == ':' && at(sc, p + 1) >= 0 && is_hex(at(sc, p + 1))) {
            p++;
        } else {
            break;
        }
    }
    if (!end || groups > 8 || (!dbl && groups != 8) || (dbl && groups > 7))
        return 0;
    if (dbl && groups < 1 && !(end - i == 2))
        return 0;
    if (digits == 0 || (dbl && groups < 2 && end - i < 3))
        return 0;
    return end;
}

static match_t scan_ip(const scan_t *sc, size_t i)
{
    match_t m = {0, 0};
    static const char *const neg[] = {"version", "ver", "v", "release", "build", "firmware", "update",
                                      "upgrade", "python", "node", "chrome", "ios", "android", "sdk", "mask",
                                      "netmask", "subnet mask", NULL};
    static const char *const pos[] = {"ip", "address", "server", "host", "ping", "connect", "gateway", "dns",
                                      "router", "firewall", "block", "whitelist", "allowlist", NULL};
    size_t e = is_digit(at(sc, i)) ? ipv4_at(sc, i) : 0;
    if (e && at(sc, e) == '.' && is_digit(at(sc, e + 1)))
        return m; /* 1.2.3.4.5 */
    if (e && clean_end(sc, e) && at(sc, e) != '-') {
        m.end = e;
        m.score = 0.6f;
        if (cue_before(sc, i, pos))
            m.score += 0.3f;
        if (cue_before(sc, i, neg))
            m.score -= 0.4f;
        if (sc->s[i] == '2' && sc->s[i + 1] == '5' && sc->s[i + 2] == '5' && sc->s[i + 3] == '.')
            m.score -= 0.3f; /* a netmask */
        if (i > 0 && (sc->s[i - 1] == 'v' || sc->s[i - 1] == 'V'))
            m.score = 0;
    }
    size_t e6 = ipv6_at(sc, i);
    if (e6 && e6 > m.end && (at(sc, e6) < 0 || !is_alnum(at(sc, e6))) && at(sc, e6) != ':') {
        m.end = e6;
        m.score = 0.85f;
    }
    m.score = clampf(m.score);
    return m;
}

/* ---- digit runs with separators (cards, phones, SSNs) ---- */
typedef struct {
    size_t end;
    int ndigits;
    int ngroups;
    int glen[8];
    char sep[8]; /* separator before group k (0 for the first) */
    char digits[24];
    int plus, paren;
} digits_t;

/* digits in up to 8 groups joined by one of " -." (or "(ddd) "); stops at
 * anything else.  0 when no digits */
static int read_groups(const scan_t *sc, size_t i, digits_t *d)
{
    memset(d, 0, sizeof *d);
    size_t p = i;
    if (at(sc, p) == '+') {
        d->plus = 1;
        p++;
    }
    for (;;) {
        char sep = 0;
        if (d->ngroups) {
            int c = at(sc, p);
            if ((c == ' ' || c == '-' || c == '.') && at(sc, p + 1) >= 0 &&
                (is_digit(at(sc, p + 1)) || at(sc, p + 1) == '(')) {
                sep = (char)c;
                p++;
            } else if (c == '(' || (d->paren == 1 && is_digit(c))) {
                sep = ' ';
            } else {
                break;
            }
        }
        int paren = 0;
        if (at(sc, p) == '(') {
            paren = 1;
            p++;
        }
        size_t b = p;
        while (at(sc, p) >= 0 && is_digit(at(sc, p)) && d->ndigits < 23)
            d->digits[d->ndigits++] = (char)sc->s[p++];
        if (p == b)
            return d->ngroups > 0;
        size_t glen = p - b;
        if (paren) {
            if (at(sc, p) != ')')
                return 0;
            p++;
            d->paren = 1;
            if (at(sc, p) == ' ' && is_digit(at(sc, p + 1)))
                p++;
        } else if (d->paren == 1) {
            d->paren = 2;
        }
        if (d->ngroups == 8 || d->ndigits >= 23)
            return 0;
        d->sep[d->ngroups] = sep;
        d->glen[d->ngroups++] = (int)glen;
        d->end = paren ? b + glen + 1 : p;
    }
    return 1;
}

static int luhn(const char *dg, int n)
{
    int sum = 0;
    for (int k = 0; k < n; k++) {
        int v = dg[n - 1 - k] - '0';
        if (k & 1) {
            v *= 2;
            if (v > 9)
                v -= 9;
        }
        sum += v;
    }
    return sum % 10 == 0;
}

static int num(const char *dg, int n)
{
    int v = 0;
    for (int k = 0; k < n; k++)
        v = v * 10 + dg[k] - '0';
    return v;
}

static int card_prefix(const char *dg, int n)
{
    int p2 = num(dg, 2), p3 = num(dg, 3), p4 = num(dg, 4), p6 = num(dg, 6);
    if (dg[0] == '4')
        return n == 13 || n == 16 || n == 19;
    if ((p2 >= 51 && p2 <= 55) || (p4 >= 2221 && p4 <= 2720))
        return n == 16;
    if (p2 == 34 || p2 == 37)
        return n == 15;
    if (p4 == 6011 || p2 == 65 || (p3 >= 644 && p3 <= 649) || (p6 >= 622126 && p6 <= 622925))
        return n >= 16 && n <= 19;
    if (p2 == 35 && p4 >= 3528 && p4 <= 3589)
        return n >= 16 && n <= 19;
    if (p2 == 36 || p2 == 38 || p2 == 39 || (p3 >= 300 && p3 <= 305))
        return n >= 14 && n <= 19;
    if (p2 == 62)
        return n >= 16 && n <= 19;
    return 0;
}

static const char *const NEG_NUMBER[] = {"isbn", "order", "invoice", "tracking", "serial", "ticket", "ref",
                                         "reference", "sku", "part", "version", "build", "id", "zip", "po",
                                         NULL};

static match_t scan_card(const scan_t *sc, size_t i, const digits_t *d)
{
    match_t m = {0, 0};
    if (d->plus || d->paren || d->ndigits < 13 || d->ndigits > 19)
        return m;
    for (int g = 1; g < d->ngroups; g++)
        if (d->sep[g] != d->sep[1] || d->sep[g] == '.')
            return m;
    if (!luhn(d->digits, d->ndigits) || !card_prefix(d->digits, d->ndigits))
        return m;
    m.end = d->end;
    m.score = d->ngroups > 1 ? 0.85f : 0.75f;
    static const char *const cues[] = {"card", "visa", "mastercard", "amex", "credit", "debit", "cc",
                                       "payment", "pay", "charge", NULL};
    if (cue_before(sc, i, cues))
        m.score += 0.14f;
    if (cue_before(sc, i, NEG_NUMBER))
        m.score -= 0.4f;
    m.score = clampf(m.score);
    return m;
}

static match_t scan_ssn(const scan_t *sc, size_t i, const digits_t *d)
{
    match_t m = {0, 0};
    if (d->plus || d->paren || d->ndigits != 9)
        return m;
    int dashed = d->ngroups == 3 && d->glen[0] == 3 && d->glen[1] == 2 && d->glen[2] == 4 &&
                 d->sep[1] == d->sep[2] && (d->sep[1] == '-' || d->sep[1] == ' ');
    if (!dashed && d->ngroups != 1)
        return m;
    int area = num(d->digits, 3), group = num(d->digits + 3, 2), serial = num(d->digits + 5, 4);
    if (area == 0 || area == 666 || area >= 900 || group == 0 || serial == 0)
        return m;
    int same = 1;
    for (int k = 1; k < 9; k++)
        same &= d->digits[k] == d->digits[0];
    if (same)
        return m;
    static const char *const cues[] = {"ssn", "social security", "social", "ss#", "ss", "taxpayer", "tin",
                                       "ssn#", NULL};
    m.end = d->end;
    m.score = dashed ? (d->sep[1] == '-' ? 0.7f : 0.4f) : 0.2f;
    if (cue_before(sc, i, cues))
        m.score += 0.6f;
    if (cue_before(sc, i, NEG_NUMBER))
        m.score -= 0.3f;
    m.score = clampf(m.score);
    return m;
}

static match_t scan_phone(const scan_t *sc, size_t i, const digits_t *d)
{
    match_t m = {0, 0};
    int n = d->ndigits;
    const char *dg = d->digits;
    float s = 0;
    if (d->plus) {
        if (n >= 8 && n <= 15 && (d->ngroups >= 2 || n >= 10))
            s = 0.75f;
    } else {
        /* NANP: [1] NXX NXX XXXX */
        int off = (n == 11 && dg[0] == '1') ? 1 : 0;
        int nanp = n - off == 10 && dg[off] >= '2' && dg[off + 3] >= '2';
        int shape = 0;
        if (d->ngroups == 1)
            shape = 0;
        else if (d->ngroups == 3 + off && d->glen[off] == 3 && d->glen[off + 1] == 3 && d->glen[off + 2] == 4)
            shape = 1;
        else if (d->ngroups == 2 + off && d->paren && d->glen[off] == 3 && d->glen[off + 1] == 7)
            shape = 1;
        if (nanp && shape)
            s = d->sep[d->ngroups - 1] == ' ' && !d->paren ? 0.55f : 0.7f;
        else if (nanp && d->ngroups == 1)
            s = 0.3f;
        else if (dg[0] == '0' && (n == 10 || n == 11) && d->ngroups >= 2 && d->ngroups <= 4 &&
                 d->glen[d->ngroups - 1] >= 3 && d->glen[0] >= 3)
            s = 0.6f; /* national trunk prefix: 020 7946 0958, 07700 900123 */
    }
    if (s <= 0)
        return m;
    static const char *const cues[] = {"call", "phone", "tel", "telephone", "mobile", "cell", "reach me",
                                       "text me", "text", "whatsapp", "fax", "contact", "number", "dial",
                                       "ring", "sms", "on", NULL};
    if (cue_before(sc, i, cues))
        s += 0.3f;
    if (cue_before(sc, i, NEG_NUMBER))
        s -= 0.4f;
    m.end = d->end;
    m.score = clampf(s);
    return m;
}

/* ---- IBAN_CODE ---- */
static const struct {
    char cc[3];
    int len;
} IBAN_LEN[] = {
    {"AD", 24}, {"AE", 23}, {"AL", 28}, {"AT", 20}, {"AZ", 28}, {"BA", 20}, {"BE", 16}, {"BG", 22},
    {"BH", 22}, {"BR", 29}, {"BY", 28}, {"CH", 21}, {"CR", 22}, {"CY", 28}, {"CZ", 24}, {"DE", 22},
    {"DK", 18}, {"DO", 28}, {"EE", 20}, {"EG", 29}, {"ES", 24}, {"FI", 18}, {"FO", 18}, {"FR", 27},
    {"GB", 22}, {"GE", 22}, {"GI", 23}, {"GL", 18}, {"GR", 27}, {"GT", 28}, {"HR", 21}, {"HU", 28},
    {"IE", 22}, {"IL", 23}, {"IQ", 23}, {"IS", 26}, {"IT", 27}, {"JO", 30}, {"KW", 30}, {"KZ", 20},
    {"LB", 28}, {"LC", 32}, {"LI", 21}, {"LT", 20}, {"LU", 20}, {"LV", 21}, {"MC", 27}, {"MD", 24},
    {"ME", 22}, {"MK", 19}, {"MR", 27}, {"MT", 31}, {"MU", 30}, {"NL", 18}, {"NO", 15}, {"PK", 24},
    {"PL", 28}, {"PS", 29}, {"PT", 25}, {"QA", 29}, {"RO", 24}, {"RS", 22}, {"SA", 24}, {"SC", 31},
    {"SE", 24}, {"SI", 19}, {"SK", 24}, {"SM", 27}, {"ST", 25}, {"SV", 28}, {"TL", 23}, {"TN", 24},
    {"TR", 26}, {"UA", 29}, {"VA", 22}, {"VG", 24}, {"XK", 20},
};

static match_t scan_iban(const scan_t *sc, size_t i)
{
    match_t m = {0, 0};
    if (!is_upper(at(sc, i)) || !is_upper(at(sc, i + 1)) || !is_digit(at(sc, i + 2)) || !is_digit(at(sc, i + 3)))
        return m;
    int want = 0;
    for (size_t k = 0; k < VSR_ARRAY_LEN(IBAN_LEN); k++)
        if (IBAN_LEN[k].cc[0] == sc->s[i] && IBAN_LEN[k].cc[1] == sc->s[i + 1])
            want = IBAN_LEN[k].len;
    if (!want)
        return m;
    char buf[40];
    int n = 0;
    size_t p = i, end = 0;
    while (n < want) {
        int c = at(sc, p);
        if (c == ' ' && n % 4 == 0 && n > 0 && at(sc, p + 1) >= 0 && is_alnum(at(sc, p + 1))) {
            p++;
            continue;
        }
        if (c < 0 || !(is_digit(c) || is_upper(c)))
            return m;
        buf[n++] = (char)c;
        p++;
    }
    end = p;
    if (!clean_end(sc, end))
        return m;
    /* mod 97 of BBAN + country + check digits, letters as 10..35 */
    unsigned r = 0;
    for (int k = 0; k < n; k++) {
        int c = buf[(k + 4) % n];
        if (is_digit(c))
            r = (r * 10 + (unsigned)(c - '0')) % 97;
        else
            r = (r * 100 + (unsigned)(c - 'A' + 10)) % 97;
    }
    if (r != 1)
        return m;
    m.end = end;
    m.score = 0.95f;
    return m;
}

/* ---- words ---- */

/* a capitalised word at i ("Smith", "O'Brien", "McDonald", "Jean-Luc",
 * "José", "Élodie"); returns its end or 0 */
static size_t cap_word(const scan_t *sc, size_t i)
{
    size_t p = i;
    if (is_upper(at(sc, p)))
        p++;
    else if (utf8_upper_at(sc, p))
        p += 2;
    else
        return 0;
    size_t b = p;
    while (at(sc, p) >= 0 && p - i < 40) {
        int c = at(sc, p);
        if (is_lower(c) || c >= 0x80)
            p++;
        else if ((c == '\'' || c == '-') && (p > b || (c == '\'' && (sc->s[i] == 'O' || sc->s[i] == 'D'))) &&
                 at(sc, p + 1) >= 0 && is_alpha(at(sc, p + 1)) &&
                 !(c == '\'' && at(sc, p + 1) == 's' && !is_alpha(at(sc, p + 2))))
            p++;
        else if (is_upper(c) && ((p - i == 2 && sc->s[i] == 'M' && sc->s[i + 1] == 'c') ||
                                 (p >= i + 2 && sc->s[p - 1] == '\'')))
            p++; /* McDonald, O'Brien */
        else
            break;
    }
    if (p == b || (at(sc, p) >= 0 && (is_digit(at(sc, p)) || is_upper(at(sc, p)) || at(sc, p) == '_')))
        return 0;
    return p;
}

/* an all-letter word at i of any case; returns its end or 0 */
static size_t any_word(const scan_t *sc, size_t i)
{
    size_t p = i;
    while (at(sc, p) >= 0 && is_alpha(at(sc, p)) && p - i < 40)
        p++;
    return p > i ? p : 0;
}

static size_t skip_space(const scan_t *sc, size_t p)
{
    if (at(sc, p) == ' ')
        return p + 1;
    return p;
}

static int is_first(const scan_t *sc, size_t b, size_t e)
{
    return in_list(pii_first_names, VSR_ARRAY_LEN(pii_first_names), sc->s + b, e - b);
}
static int is_last(const scan_t *sc, size_t b, size_t e)
{
    return in_list(pii_last_names, VSR_ARRAY_LEN(pii_last_names), sc->s + b, e - b);
}
static int is_stop(const scan_t *sc, size_t b, size_t e) { return in_small(STOP_CAPS, sc->s + b, e - b); }

/* 1 when pos starts a sentence (text start, or after ". ", "! ", "? ", newline) */
static int sentence_start(const scan_t *sc, size_t pos)
{
    size_t p = pos;
    while (p > 0 && (sc->s[p - 1] == ' ' || sc->s[p - 1] == '"' || sc->s[p - 1] == '\''))
        p--;
    return p == 0 || one_of(sc->s[p - 1], ".!?\n:;*-#>");
}

/* ---- STREET_ADDRESS ---- */
static const char *const STREET_ABBR[] = {"Street", "St", "Lane", "Ln", "Ave", "Av", "Rd", "Blvd",
                                          "Boulevard", "Dr", "Ct", "Pl", "Pkwy", "Hwy", "Sq", "Ter", "Cir",
                                          "Trl", "Park", "Close", "Row", "Wy", "Strasse", "Straße", NULL};
static const char *const UNIT_WORDS[] = {"Apt", "Apartment", "Suite", "Ste", "Unit", "Floor", "Fl", "Room",
                                         "Rm", "Building", "Bldg", NULL};

static int street_type(const scan_t *sc, size_t b, size_t e)
{
    return in_small(STREET_ABBR, sc->s + b, e - b) ||
           in_list(pii_street_suffixes, VSR_ARRAY_LEN(pii_street_suffixes), sc->s + b, e - b);
}

static match_t scan_street(const scan_t *sc, size_t i)
{
    match_t m = {0, 0};
    size_t p = i;
    while (is_digit(at(sc, p)) && p - i < 6)
        p++;
    if (p == i || p - i > 5)
        return m;
    if (is_upper(at(sc, p)) && !is_alpha(at(sc, p + 1)))
        p++; /* 221B */
    if (at(sc, p) != ' ')
        return m;
    p++;
    size_t street_end = 0;
    int words = 0;
    for (int w = 0; w < 5; w++) {
        size_t b = p, e;
        if (is_digit(at(sc, b))) { /* 5th, 42nd */
            e = b;
            while (is_digit(at(sc, e)))
                e++;
            size_t suf = any_word(sc, e);
            if (!suf || suf - e != 2)
                break;
            e = suf;
        } else {
            e = cap_word(sc, b);
            if (!e) {
                if (is_upper(at(sc, b)) && !is_alpha(at(sc, b + 1))) /* N, S. */
                    e = b + 1;
                else
                    break;
            }
        }
        words++;
        if (words >= 2 && street_type(sc, b, e)) {
            /* the last street type of the run: "Willow Creek Road" */
            street_end = e;
            if (at(sc, e) == '.' && e - b <= 4)
                street_end = e + 1;
            if (at(sc, street_end) != ' ' || !cap_word(sc, street_end + 1) ||
                !street_type(sc, street_end + 1, cap_word(sc, street_end + 1)))
                break;
        } else if (is_stop(sc, b, e) && w > 0) {
            break;
        }
        if (at(sc, e) != ' ')
            break;
        p = e + 1;
    }
    if (!street_end)
        return m;
    /* the street type ends the name: "10 Most Common Mistakes" is no address */
    size_t q = street_end;
    if (at(sc, q) == ' ' && cap_word(sc, q + 1) && !in_small(UNIT_WORDS, sc->s + q + 1, cap_word(sc, q + 1) - q - 1))
        return m;
    size_t end = street_end;
    /* a quadrant: "Avenue NW", "Street S." */
    if (at(sc, end) == ' ' && one_of(at(sc, end + 1), "NSEW")) {
        size_t r = end + 2;
        if (one_of(at(sc, r), "EW"))
            r++;
        if (at(sc, r) == '.')
            r++;
        if (!is_alnum(at(sc, r)))
            end = r;
    }
    /* unit */
    q = end;
    if (at(sc, q) == ',')
        q++;
    q = skip_space(sc, q);
    size_t ue = cap_word(sc, q);
    if ((ue && in_small(UNIT_WORDS, sc->s + q, ue - q)) || at(sc, q) == '#') {
        size_t r = ue ? ue : q;
        if (at(sc, r) == '.')
            r++;
        r = skip_space(sc, r);
        if (at(sc, r) == '#')
            r++;
        size_t b = r;
        while (at(sc, r) >= 0 && (is_digit(at(sc, r)) || is_upper(at(sc, r))) && r - b < 6)
            r++;
        if (r > b && clean_end(sc, r))
            end = r;
    }
    /* ", City[, ST] [ZIP]" */
    q = end;
    if (at(sc, q) == ',') {
        q = skip_space(sc, q + 1);
        size_t city_end = 0;
        for (int w = 0; w < 3; w++) {
            size_t e = cap_word(sc, q);
            if (!e || is_stop(sc, q, e))
                break;
            city_end = e;
            if (at(sc, e) != ' ' || !cap_word(sc, e + 1))
                break;
            q = e + 1;
        }
        if (city_end) {
            size_t r = city_end;
            if (at(sc, r) == ',')
                r++;
            r = skip_space(sc, r);
            size_t tail = 0;
            if (is_upper(at(sc, r)) && is_upper(at(sc, r + 1)) && !is_alnum(at(sc, r + 2))) {
                tail = r + 2;
                r = skip_space(sc, r + 2);
            }
            size_t zb = r;
            while (is_digit(at(sc, r)) && r - zb < 6)
                r++;
            if (r - zb == 5) {
                if (at(sc, r) == '-' && is_digit(at(sc, r + 1))) {
                    size_t z4 = r + 1;
                    while (is_digit(at(sc, z4)) && z4 - r < 6)
                        z4++;
                    if (z4 - r == 5)
                        r = z4;
                }
                tail = r;
            }
            end = tail ? tail : city_end;
        }
    }
    m.end = end;
    m.score = 0.75f;
    static const char *const cues[] = {"live at", "lives at", "living at", "address", "located at", "ship to",
                                       "deliver", "send it to", "mail it to", "reside", "moved to", "home",
                                       NULL};
    if (cue_before(sc, i, cues))
        m.score += 0.2f;
    m.score = clampf(m.score);
    return m;
}

/* ---- DATE_TIME ---- */
static const char *const MONTHS[] = {"january", "february", "march", "april", "may", "june", "july",
                                     "august", "september", "october", "november", "december"};

/* a month name (full or three letters, optional '.') at i; returns its end or 0 */
static size_t month_at(const scan_t *sc, size_t i)
{
    if (!is_upper(at(sc, i)))
        return 0;
    size_t e = any_word(sc, i);
    if (!e)
        return 0;
    size_t n = e - i;
    for (int k = 0; k < 12; k++) {
        size_t full = strlen(MONTHS[k]);
        if (n != full && n != 3 && !(k == 8 && n == 4))
            continue;
        if (n > full)
            continue;
        size_t j = 0;
        while (j < n && lower(sc->s[i + j]) == MONTHS[k][j])
            j++;
        if (j == n) {
            if (n < full && at(sc, e) == '.')
                e++;
            return e;
        }
    }
    return 0;
}

/* a number at i of 1..maxd digits with value in [lo, hi]; returns its end or 0 */
static size_t number_at(const scan_t *sc, size_t i, int mind, int maxd, int lo, int hi, int *val)
{
    size_t p = i;
    int v = 0;
    while (is_digit(at(sc, p)) && (int)(p - i) < maxd + 1)
        v = v * 10 + (sc->s[p++] - '0');
    if ((int)(p - i) < mind || (int)(p - i) > maxd || v < lo || v > hi)
        return 0;
    if (val)
        *val = v;
    return p;
}

static size_t ordinal_suffix(const scan_t *sc, size_t p)
{
    static const char *const sfx[] = {"st", "nd", "rd", "th"};
    for (int k = 0; k < 4; k++)
        if (at(sc, p) == sfx[k][0] && at(sc, p + 1) == sfx[k][1] && !is_alpha(at(sc, p + 2)))
            return p + 2;
    return p;
}

static size_t year_after(const scan_t *sc, size_t p)
{
    if (at(sc, p) == ',')
        p++;
    p = skip_space(sc, p);
    size_t e = number_at(sc, p, 4, 4, 1900, 2099, NULL);
    return e && clean_end(sc, e) ? e : 0;
}

/* " at 10:30", " 14:05", " 9am" after a date */
static size_t time_after(const scan_t *sc, size_t p)
{
    size_t q = p;
    if (at(sc, q) == ',')
        q++;
    q = skip_space(sc, q);
    if (at(sc, q) == 'a' && at(sc, q + 1) == 't' && at(sc, q + 2) == ' ')
        q += 3;
    size_t h = number_at(sc, q, 1, 2, 0, 23, NULL);
    if (!h)
        return p;
    size_t e = h;
    if (at(sc, h) == ':' && number_at(sc, h + 1, 2, 2, 0, 59, NULL))
        e = h + 3;
    size_t ap = skip_space(sc, e);
    if ((lower(at(sc, ap)) == 'a' || lower(at(sc, ap)) == 'p') && lower(at(sc, ap + 1)) == 'm' &&
        !is_alpha(at(sc, ap + 2)))
        e = ap + 2;
    else if (e == h)
        return p;
    return e;
}

static match_t scan_date(const scan_t *sc, size_t i)
{
    match_t m = {0, 0};
    size_t e = 0;
    float s = 0;
    size_t me = month_at(sc, i);
    if (me) { /* March 3, 1985 | March 3rd | March 1985 */
        size_t p = skip_space(sc, me);
        size_t d = p > me ? number_at(sc, p, 1, 2, 1, 31, NULL) : 0;
        if (d && clean_end(sc, ordinal_suffix(sc, d))) {
            d = ordinal_suffix(sc, d);
            size_t y = year_after(sc, d);
            e = y ? y : d;
            s = y ? 0.65f : 0.55f;
        }
    } else if (is_digit(at(sc, i))) {
        int a = 0, b = 0, c = 0;
        size_t d = number_at(sc, i, 1, 2, 1, 31, NULL);
        if (d) { /* 3 March 1985 | 3rd of March 1985 */
            size_t p = ordinal_suffix(sc, d);
            p = skip_space(sc, p);
            if (at(sc, p) == 'o' && at(sc, p + 1) == 'f' && at(sc, p + 2) == ' ')
                p += 3;
            size_t mm = p > d ? month_at(sc, p) : 0;
            if (mm) {
                size_t y = year_after(sc, mm);
                e = y ? y : mm;
                s = y ? 0.65f : 0.55f;
            }
        }
        if (!e) { /* numeric: yyyy-mm-dd, dd/mm/yyyy, mm/dd/yyyy, dd.mm.yyyy, mm/dd/yy */
            size_t p1 = number_at(sc, i, 1, 4, 0, 9999, &a);
            int sep = p1 ? at(sc, p1) : -1;
            if (sep == '-' || sep == '/' || sep == '.') {
                size_t p2 = number_at(sc, p1 + 1, 1, 2, 1, 31, &b);
                if (p2 && at(sc, p2) == sep) {
                    size_t p3 = number_at(sc, p2 + 1, 2, 4, 0, 9999, &c);
                    int ok = 0;
                    if (p3 && p1 - i == 4 && p3 - p2 - 1 == 2)
                        ok = a >= 1900 && a <= 2099 && b <= 12 && c >= 1 && c <= 31;
                    else if (p3 && p1 - i <= 2 && (p3 - p2 - 1 == 4 || (p3 - p2 - 1 == 2 && sep == '/')))
                        ok = a >= 1 && ((a <= 12 && b <= 31) || (b <= 12 && a <= 31)) &&
                             (p3 - p2 - 1 == 2 || (c >= 1900 && c <= 2099));
                    if (ok && clean_end(sc, p3)) {
                        e = p3;
                        s = 0.4f;
                        if (i > 0 && one_of(sc->s[i - 1], "\"'=(`[{"))
                            s = 0.2f;
                    }
                }
            }
        }
    }
    if (!e)
        return m;
    e = time_after(sc, e);
    static const char *const cues[] = {"born", "birth", "dob", "d.o.b", "birthday", "appointment", "expires",
                                       "expiry", "issued", "admitted", "discharged", "scheduled", "visit",
                                       "died", "married", "hired", "date", NULL};
    static const char *const neg[] = {"version", "released", "release", "changelog", "commit", "build", NULL};
    if (cue_before(sc, i, cues))
        s += 0.4f;
    if (cue_before(sc, i, neg))
        s -= 0.3f;
    m.end = e;
    m.score = clampf(s);
    return m;
}

/* ---- ORGANIZATION ---- */
static const char *const ORG_LEGAL[] = {"Inc", "LLC", "Ltd", "Corp", "Corporation", "Incorporated", "Limited",
                                        "GmbH", "AG", "PLC", "LLP", "LP", "SA", "SAS", "SARL", "BV", "NV",
                                        "Pty", "Co", "KG", "SpA", "Oy", "AB", "ASA", NULL};
static const char *const ORG_WEAK[] = {"Group", "Holdings", "Technologies", "Labs", "Partners", "Capital",
                                       "Ventures", "Consulting", "Bank", "University", "Institute",
                                       "Foundation", "Association", "Hospital", "Clinic", "Airlines",
                                       "Insurance", "Industries", "Enterprises", "Pharmaceuticals", NULL};
static const char *const ORG_CUES[] = {"work at", "work for", "works at", "works for", "worked at",
                                       "worked for", "working at", "working for", "employed at", "employed by",
                                       "employer is", "intern at", "joined", "company is", "company called",
                                       "hired by", "job at", "position at", "role at", "engineer at",
                                       "manager at", "interview with", "interview at", "client is", NULL};

/* the end of an upper-case or mixed token (AG, IBM, GmbH, SpA) at i */
static size_t token_at(const scan_t *sc, size_t i)
{
    size_t p = i;
    while (at(sc, p) >= 0 && is_alpha(at(sc, p)) && p - i < 40)
        p++;
    return p;
}

static match_t scan_org(const scan_t *sc, size_t i)
{
    match_t m = {0, 0};
    if (!is_upper(at(sc, i)) && !utf8_upper_at(sc, i))
        return m;
    size_t p = i, name_end = 0;
    int words = 0;
    for (int w = 0; w < 5; w++) {
        size_t e = token_at(sc, p);
        if (e == p || !(is_upper(sc->s[p]) || utf8_upper_at(sc, p)))
            break;
        if (words > 0) {
            size_t te = e;
            float s = 0;
            if (in_small(ORG_LEGAL, sc->s + p, e - p))
                s = 0.85f;
            else if (in_small(ORG_WEAK, sc->s + p, e - p))
                s = 0.55f;
            if (s > 0) {
                if (at(sc, te) == '.' && te - p <= 4)
                    te++;
                m.end = te;
                m.score = s;
                return m;
            }
        }
        if (is_stop(sc, p, e))
            break;
        words++;
        name_end = e;
        /* joiners: "Procter & Gamble", "Johnson and Sons", "Smith, Inc." */
        size_t q = e;
        if (at(sc, q) == ',' && at(sc, q + 1) == ' ') {
            size_t t = token_at(sc, q + 2);
            if (t > q + 2 && in_small(ORG_LEGAL, sc->s + q + 2, t - q - 2)) {
                if (at(sc, t) == '.')
                    t++;
                m.end = t;
                m.score = 0.85f;
                return m;
            }
            break;
        }
        if (at(sc, q) != ' ')
            break;
        q++;
        if (at(sc, q) == '&' && at(sc, q + 1) == ' ')
            q += 2;
        else if (at(sc, q) == 'a' && at(sc, q + 1) == 'n' && at(sc, q + 2) == 'd' && at(sc, q + 3) == ' ')
            q += 4;
        p = q;
    }
    /* a cue: "I work at Initech" */
    static const char *const last[] = {"at", "for", "by", "joined", "is", "called", "with", NULL};
    if (name_end && word_before_is(sc, i, last) && !sentence_start(sc, i) && cue_before(sc, i, ORG_CUES)) {
        m.end = name_end; /* the cue ends right before the name */
        m.score = 0.65f;
    }
    return m;
}

/* ---- PERSON ---- */
static const char *const TITLES[] = {"mr", "mrs", "ms", "miss", "dr", "prof", "professor", "mx", "sir",
                                     "madam", "mister", "mrs.", NULL};
static const char *const STRONG_CUES[] = {"my name is", "name is", "named", "name", "patient", "signed",
                                          "full name", "his name", "her name", "their name", "client",
                                          "employee", "tenant", "applicant", "candidate", "contact person",
                                          "emergency contact", "recipient", "passenger", "beneficiary", "customer", "user",
                                          "owner", "holder", "member", "student", "guest", "signed by", "i am",
                                          "i'm", "my name's", "call me", "this is", "fn", "attn",
                                          "c/o", "sender", "contact", NULL};
static const char *const GREETINGS[] = {"dear", "hi", "hello", "hey", "thanks", "thank you", "cheers",
                                        "regards", "sincerely", "best", "yours", "love", "from", "cc", "to",
                                        "with", "ask", "tell", "told", "asked", "met", "meet", "call", "email",
                                        "i am", "i'm", "im", "this is", "me", "and", "by", "for", "contact",
                                        "colleague", "manager", "boss", "wife", "husband", "son", "daughter",
                                        "friend", "brother", "sister", "mother", "father", "mom", "dad",
                                        "neighbor", "neighbour", "doctor", "teacher", "says", "said", "grandson",
                                        "granddaughter", "niece", "nephew", "cousin", "kid", "roommate",
                                        "coworker", "classmate", "partner", "fiance", "girlfriend", "boyfriend",
                                        "landlord", "accountant", "lawyer", "plumber", "intern", "assistant",
                                        "nurse", "dentist", "coach", "tutor", "uncle", "aunt", "baby", "morning",
                                        "evening", "afternoon", NULL};

static const char *const RELATIONS[] = {"Uncle", "Aunt", "Auntie", "Grandma", "Grandpa", "Granny", "Cousin",
                                        "Grandmother", "Grandfather", NULL};
static const char *const ARTICLES[] = {"the", "a", "an", "this", "that", "our", "its", NULL};
static const char *const OBJECT_VERBS[] = {"let", "tell", "ask", "text", "call", "email", "invite", "thank",
                                           "remind", "meet", "ping", "message", "cc", "help", "pay", "told",
                                           "asked", "where", "when", "for", NULL};

/* "Dear ..." that greets no one in particular */
static const char *const DEAR_GENERIC[] = {"Diary", "Valued", "Colleague", "Colleagues", "Friend", "Friends",
                                           "Reader", "Readers", "Member", "Members", "Parent", "Parents",
                                           "Student", "Students", "Applicant", "Candidate", "Client", "Guest",
                                           "Guests", "Neighbour", "Neighbor", "Neighbours", "Neighbors", "Editor",
                                           "Committee", "Board", "Future", "God", "Lord", "Santa", NULL};
/* relation nouns after a possessive: "my coworker Dmitri", "our tenant Okafor" */
static const char *const REL_NOUNS[] = {"colleague", "coworker", "manager", "boss", "wife", "husband", "son",
                                        "daughter", "friend", "brother", "sister", "mother", "father", "mom", "dad",
                                        "neighbor", "neighbour", "doctor", "teacher", "grandson", "granddaughter",
                                        "niece", "nephew", "cousin", "roommate", "classmate", "partner", "fiance",
                                        "fiancee", "girlfriend", "boyfriend", "landlord", "landlady", "accountant",
                                        "lawyer", "tenant", "client", "patient", "student", "employee", "nanny",
                                        "uncle", "aunt", "grandma", "grandpa", "stepson", "stepdaughter", "kid",
                                        "child", "baby", "therapist", "supervisor", "assistant", NULL};
static const char *const POSSESSIVES[] = {"my", "our", "your", "his", "her", "their", NULL};
/* countries and regions that are also given names in the gazetteer: a place, alone */
static const char *const PLACES[] = {"France", "England", "Spain", "Portugal", "Ireland", "Jordan", "Chad",
                                     "Georgia", "India", "Israel", "Kenya", "Italy", "China", "Russia", "America",
                                     "Africa", "Asia", "Europe", "Egypt", "Greece", "Rome", "Paris", "London",
                                     "Sydney", "Florence", "Virginia", "Carolina", "Dakota", "Indiana",
                                     "Austin", "Houston", "Denver", "Phoenix", "Savannah", "Lincoln",
                                     "Cuba", "Peru", "Chile", "Brazil", "Mexico", "Canada", "Japan", "Korea", NULL};
/* surnames of people a question names as history, science or philosophy, not
 * as someone's personal data (with no cue; written for vsr; surnames common
 * among ordinary people, such as Wilson or Ford, are left out) */
static const char *const FAMOUS[] = {
    "Einstein", "Newton", "Darwin", "Freud", "Marx", "Luther", "Mill", "Kant", "Hegel", "Nietzsche", "Plato",
    "Aristotle", "Socrates", "Descartes", "Locke", "Hobbes", "Hume", "Rousseau", "Roosevelt", "Lincoln",
    "Jefferson", "Bonaparte", "Napoleon", "Khan", "Caesar", "Churchill", "Stalin", "Hitler", "Mussolini",
    "Lenin", "Gandhi", "Mandela", "Coolidge", "Truman", "Eisenhower", "Nixon",
    "Reagan", "Obama", "Madison", "Bismarck", "Victoria",
    "Galileo", "Copernicus", "Kepler", "Pasteur", "Curie", "Mendel", "Faraday", "Bohr", "Heisenberg",
    "Schrodinger", "Planck", "Feynman", "Hawking", "Turing", "Shakespeare", "Dickens", "Tolstoy", "Dostoevsky",
    "Dante", "Chaucer", "Keynes", "Ricardo", "Malthus", "Hayek", "Piaget",
    "Pavlov", "Maslow", "Erikson", "Jung", "Bandura", "Milgram", "Zimbardo", "Kohlberg", "Vygotsky",
    "Chomsky", "Rawls", "Nozick", "Aquinas", "Augustine", "Confucius", "Buddha", "Spinoza", "Leibniz",
    "Bentham", "Kierkegaard", "Sartre", "Wittgenstein", "Popper", "Kuhn", "Beethoven", "Mozart",
    "Bach", "Picasso", "Michelangelo", "Columbus", "Magellan", "Cromwell", "Pythagoras",
    "Euclid", "Archimedes", "Euler", "Gauss", "Riemann", "Fermat", "Pascal", "Bernoulli", "Hippocrates",
    "Galen", "Nightingale", "Crick", "Edison", "Tesla",
    "Carnegie", "Rockefeller", "Durkheim", "Comte", "Tocqueville", "Montesquieu",
    "Machiavelli", "Voltaire", "Engels", "Mao", "Trotsky", "Castro", "Bolivar", "Cleopatra",
    "Charlemagne", "Justinian", "Constantine", "Suleiman", "Akbar", "Medici", NULL};

/* the start of the word that ends right before pos (spaces and one ',' ':'
 * '.' skipped), or pos when there is none */
static size_t prev_word_start(const scan_t *sc, size_t pos)
{
    size_t e = pos;
    while (e > 0 && (sc->s[e - 1] == ' ' || sc->s[e - 1] == '\t'))
        e--;
    if (e > 0 && (sc->s[e - 1] == ':' || sc->s[e - 1] == ',' || sc->s[e - 1] == '.'))
        e--;
    size_t b = e;
    while (b > 0 && is_alpha(sc->s[b - 1]) && e - b < 24)
        b--;
    return b == e ? pos : b;
}

/* 1 when pos follows a multiple-choice marker: "A) ", "(b) ", "C. " */
static int after_choice(const scan_t *sc, size_t pos)
{
    size_t e = pos;
    while (e > 0 && sc->s[e - 1] == ' ' && pos - e < 3)
        e--;
    if (e < 2 || e == pos || !(sc->s[e - 1] == ')' || sc->s[e - 1] == '.'))
        return 0;
    int c = sc->s[e - 2];
    if (!((c >= 'A' && c <= 'J') || (c >= 'a' && c <= 'j')))
        return 0;
    return e == 2 || !is_alnum(sc->s[e - 3]);
}

static match_t scan_person(const scan_t *sc, size_t i)
{
    match_t m = {0, 0};
    size_t b[3], e[3];
    int n = 0;
    size_t p = i;
    int relation = 0;
    size_t re = cap_word(sc, i);
    if (re && in_small(RELATIONS, sc->s + i, re - i) && at(sc, re) == ' ' && cap_word(sc, re + 1)) {
        relation = 1; /* "Uncle Bill", "Grandma Rose": the word is part of the span */
        p = re + 1;
    }
    while (n < 3) {
        size_t we = cap_word(sc, p);
        if (!we || is_stop(sc, p, we))
            break;
        b[n] = p;
        e[n] = we;
        n++;
        size_t q = we;
        /* a middle initial: "John F. Kennedy" */
        if (n == 1 && at(sc, q) == ' ' && is_upper(at(sc, q + 1)) && at(sc, q + 2) == '.' && at(sc, q + 3) == ' ')
            q += 3;
        if (at(sc, q) != ' ')
            break;
        p = q + 1;
    }
    if (n == 0)
        return m;
    int f0 = is_first(sc, b[0], e[0]);
    int titled = word_before_is(sc, i, TITLES);
    int strong = relation || titled || cue_adjacent(sc, i, STRONG_CUES);
    int greet = word_before_is(sc, i, GREETINGS);
    int object = word_before_is(sc, i, OBJECT_VERBS);
    int article = word_before_is(sc, i, ARTICLES);
    int start = sentence_start(sc, i);
    /* "Tom, you forgot", "Hello Yuki!" */
    int vocative = (at(sc, e[n - 1]) == ',' || at(sc, e[n - 1]) == '!') && (start || greet);
    /* "Thanks again, Priscilla!", "Sorry for the delay, Marcus." */
    if (i >= 2 && sc->s[i - 1] == ' ' && sc->s[i - 2] == ',' &&
        (at(sc, e[n - 1]) < 0 || one_of(at(sc, e[n - 1]), ".!?\n")))
        vocative = 1;
    /* "Tyler will miss", "Amanda from HR": a known given name as a subject */
    static const char *const SUBJECT_NEXT[] = {"will", "wants", "said", "says", "told", "asked", "from", "has",
                                               "had", "was", "and", "called", "sent", "needs", NULL};
    size_t nx = at(sc, e[n - 1]) == ' ' ? any_word(sc, e[n - 1] + 1) : 0;
    int subject = nx && is_lower(sc->s[e[n - 1] + 1]) && in_small(SUBJECT_NEXT, sc->s + e[n - 1] + 1, nx - e[n - 1] - 1);
    float s = 0;
    int keep = n;
    if (n >= 2) {
        int l1 = is_last(sc, b[1], e[1]);
        int l_any = l1 || (n == 3 && is_last(sc, b[2], e[2]));
        if (n == 3 && !(f0 && (is_first(sc, b[1], e[1]) || l1) && is_last(sc, b[2], e[2])) && !strong)
            keep = 2;
        if (f0 && l_any)
            s = 0.85f;
        else if (f0)
            s = 0.6f;
        else if (l1 && !start)
            s = 0.5f;
        else if (l1)
            s = 0.4f;
        else
            s = 0.15f;
        if (strong)
            s += 0.4f;
        else if (greet || object)
            s += 0.35f;
        else if (vocative)
            s += 0.3f;
    } else {
        if (f0)
            s = start ? 0.25f : 0.35f;
        else if (is_last(sc, b[0], e[0]))
            s = 0.15f;
        if (strong)
            s = VSR_MAX(s, 0.2f) + 0.55f;
        else if (f0 && (greet || vocative))
            s += 0.35f;
        else if (f0 && (object || subject))
            s += 0.2f;
        else if (vocative && word_before_is(sc, i, (const char *const[]){"dear", "hi", "hello", "hey", NULL}))
            s = 0.6f;
    }
    /* "Dear Rene," "Dear Okonkwo": a salutation names the person greeted */
    int dear = word_before_is(sc, i, (const char *const[]){"dear", NULL});
    if (dear)
        s = in_small(DEAR_GENERIC, sc->s + b[0], e[0] - b[0]) ? 0 : VSR_MAX(s, 0.75f);
    /* "my coworker Dmitri", "our landlord Mr Abara" */
    int rel_poss = word_before_is(sc, i, REL_NOUNS) && word_before_is(sc, prev_word_start(sc, i), POSSESSIVES);
    if (rel_poss)
        s = VSR_MAX(s, 0.65f);
    if (!strong && !dear && !rel_poss) {
        if (n == 1 && in_small(PLACES, sc->s + b[0], e[0] - b[0]))
            s = 0; /* "England and France" */
        int famous = 0;
        for (int k = 0; k < n; k++)
            famous |= in_small(FAMOUS, sc->s + b[k], e[k] - b[k]);
        if (famous)
            s -= 0.6f; /* "Theodore Roosevelt", "Martin Luther's role", "John Stuart Mill" */
        if (after_choice(sc, i))
            s -= 0.4f; /* "A) Woodrow Wilson B) ..." */
        /* "Miranda v. Arizona": a case name */
        size_t q = e[keep - 1];
        if (at(sc, q) == ' ' && at(sc, q + 1) == 'v' &&
            (at(sc, q + 2) == ' ' || (at(sc, q + 2) == '.' && at(sc, q + 3) == ' ') ||
             (at(sc, q + 2) == 's' && at(sc, q + 3) == '.')))
            s = 0;
    }
    if (article && !titled)
        s -= 0.35f; /* "the Mona Lisa", "a Golden Retriever" */
    m.end = e[keep - 1];
    m.score = clampf(s);
    return m;
}

/* ---- the pass ---- */

/* a position where an entity may start: the first byte of a word (or of
 * "+1", "(555)"), not inside a dotted or hyphenated token */
static int word_start(const scan_t *sc, size_t i)
{
    const unsigned char *s = sc->s;
    int c = s[i];
    if (!(is_alnum(c) || c == '+' || c == '(' || c == ':'))
        return 0;
    if (c >= 0x80 && (c & 0xC0) == 0x80)
        return 0;
    if (i == 0)
        return 1;
    int p = s[i - 1];
    if (p >= 0x80) { /* after punctuation such as « or 、 a word starts */
        size_t k = i - 1;
        while (k > 0 && (s[k] & 0xC0) == 0x80 && i - k < 4)
            k--;
        return utf8_punct_at(sc, k);
    }
    if (is_alnum(p) || p == '.' || p == '@' || p == '_' || p == '-' || p == '/' || p == '\\' || p == '#' ||
        p == '+' || p == '$' || p == '%' || p == '&' || p == '~')
        return 0;
    if (c == ':' && p == ':')
        return 0;
    if (p == ':' && i >= 2 && (is_hex(s[i - 2]) || s[i - 2] == ':'))
        return 0; /* inside "1::2::3" */
    if (p == '\'' && i >= 2 && is_alpha(s[i - 2]))
        return 0;
    return 1;
}

int vsr_pii_detect(const char *text, size_t len, float min_score, vsr_pii_entity_t *out, size_t cap,
                   size_t *n_out, int *truncated)
{
    if (n_out)
        *n_out = 0;
    if (truncated)
        *truncated = 0;
    if ((!text && len) || (!out && cap) || !n_out)
        return VSR_ERR_INVALID;
    scan_t sc = {(const unsigned char *)text, len, len};
    size_t n = 0, i = 0;
    while (i < len) {
        sc.lim = len;
        if (!word_start(&sc, i)) {
            i++;
            continue;
        }
        if ((sc.s[i] == '(' || sc.s[i] == '+') && (i + 1 >= len || !is_digit(sc.s[i + 1]))) {
            i++;
            continue;
        }
        sc.lim = len - i > VSR_PII_MAX_SPAN ? i + VSR_PII_MAX_SPAN : len;
        match_t best = {0, 0};
        vsr_pii_type_t best_t = VSR_PII_N_TYPES;
        match_t cand[VSR_PII_N_TYPES];
        memset(cand, 0, sizeof cand);
        int c = sc.s[i];
        if (c != ':' && c != '(' && c != '+') {
            cand[VSR_PII_EMAIL_ADDRESS] = scan_email(&sc, i);
            cand[VSR_PII_URL] = scan_url(&sc, i);
            cand[VSR_PII_IBAN_CODE] = scan_iban(&sc, i);
        }
        if (is_digit(c) || c == '+' || c == '(') {
            digits_t d;
            if (read_groups(&sc, i, &d) && clean_end(&sc, d.end)) {
                cand[VSR_PII_CREDIT_CARD] = scan_card(&sc, i, &d);
                cand[VSR_PII_US_SSN] = scan_ssn(&sc, i, &d);
                cand[VSR_PII_PHONE_NUMBER] = scan_phone(&sc, i, &d);
            }
        }
        if (is_hex(c) || c == ':')
            cand[VSR_PII_IP_ADDRESS] = scan_ip(&sc, i);
        if (is_digit(c)) {
            cand[VSR_PII_STREET_ADDRESS] = scan_street(&sc, i);
            cand[VSR_PII_DATE_TIME] = scan_date(&sc, i);
        }
        if (is_alpha(c)) {
            cand[VSR_PII_DATE_TIME] = scan_date(&sc, i);
            cand[VSR_PII_ORGANIZATION] = scan_org(&sc, i);
            cand[VSR_PII_PERSON] = scan_person(&sc, i);
            cand[VSR_PII_DOMAIN_NAME] = scan_domain(&sc, i);
        }
        for (int t = 0; t < VSR_PII_N_TYPES; t++) {
            const match_t *mt = &cand[t];
            if (mt->end <= i || mt->score <= 0 || mt->score < min_score)
                continue;
            if (mt->end > best.end) {
                best = *mt;
                best_t = (vsr_pii_type_t)t;
            }
        }
        if (best_t == VSR_PII_N_TYPES) {
            i++;
            continue;
        }
        if (n == cap) {
            if (truncated)
                *truncated = 1;
            break;
        }
        out[n].type = best_t;
        out[n].start = i;
        out[n].end = best.end;
        out[n].score = best.score;
        n++;
        i = best.end;
    }
    *n_out = n;
    return VSR_OK;
}
