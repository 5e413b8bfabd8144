/*
 * pii — a detector of personal data in text: which spans of a prompt are a
 * person's name, an e-mail address, a phone number, a card number, and so on.
 *
 * Method: one left-to-right pass.  At each word start every scanner is tried
 * (hand-written, no regular expressions); the longest match wins (ties go to
 * the type listed first below), is reported, and the pass resumes after it.
 * Structured types are validated: CREDIT_CARD by Luhn and the issuer's
 * prefix, IBAN_CODE by mod-97 and the country's length, US_SSN by the
 * area/group/serial ranges, IP_ADDRESS as dotted-quad or RFC 4291 text,
 * PHONE_NUMBER by its digit count and grouping (NANP area and exchange codes).
 * PERSON uses gazetteers of given names and surnames derived from
 * @faker-js/faker (MIT; data/pii/README.md), capitalisation and cues
 * ("my name is", "Dear", "Mr."); ORGANIZATION a company suffix ("Inc",
 * "GmbH") or a cue ("I work at"); STREET_ADDRESS a house number, capitalised
 * words and a street type, with an optional unit, city, state and ZIP code.
 * Words before a candidate raise or lower its score ("my SSN is", "call me
 * at" raise; "version", "ISBN", "order" lower).  A score is a confidence in
 * [0, 1]; a caller keeps the entities at or above its threshold
 * (VSR_PII_DEFAULT_THRESHOLD is the one the evaluation in docs/signals.md
 * was tuned for).
 *
 * Text: bytes, normally UTF-8 (bytes >= 0x80 count as letters, so a span
 * never ends inside a well-formed sequence); NUL bytes are ordinary bytes.
 * Offsets are byte offsets into the text, end exclusive.
 *
 * Bounds: time is linear in len (each scanner looks at most
 * VSR_PII_MAX_SPAN bytes ahead and VSR_PII_CONTEXT bytes back of a word
 * start); nothing is allocated; there is no recursion.  At most `cap`
 * entities are stored: the pass stops when the array is full and
 * *truncated says so.
 *
 * Ownership and threading: stateless; the gazetteers are constant data
 * compiled in.  Any number of threads may call it at once.
 *
 * Return codes: VSR_OK; VSR_ERR_INVALID when text is NULL with len > 0 or
 * out is NULL with cap > 0.
 */
#ifndef VSR_MODELS_PII_H
#define VSR_MODELS_PII_H

#include "base/base.h"

#define VSR_PII_MAX_SPAN 256  /* bytes a scanner reads past a word start */
#define VSR_PII_CONTEXT 48    /* bytes of cue words read before a candidate */
#define VSR_PII_MAX_ENTITIES 256 /* a sensible cap for callers */
#define VSR_PII_DEFAULT_THRESHOLD 0.5f

typedef enum {
    VSR_PII_EMAIL_ADDRESS,
    VSR_PII_URL,
    VSR_PII_IBAN_CODE,
    VSR_PII_CREDIT_CARD,
    VSR_PII_US_SSN,
    VSR_PII_IP_ADDRESS,
    VSR_PII_PHONE_NUMBER,
    VSR_PII_STREET_ADDRESS,
    VSR_PII_DATE_TIME,
    VSR_PII_ORGANIZATION,
    VSR_PII_PERSON,
    VSR_PII_DOMAIN_NAME,
    VSR_PII_N_TYPES
} vsr_pii_type_t;

typedef struct {
    vsr_pii_type_t type;
    size_t start, end; /* byte offsets, end exclusive */
    float score;       /* confidence in [0, 1] */
} vsr_pii_entity_t;

/* The reference's name of a type ("PERSON", "EMAIL_ADDRESS", ...); NULL for
 * a value out of range. */
const char *vsr_pii_type_name(vsr_pii_type_t type);

/* The type named name[0..len) (exact, upper case).  VSR_OK |
 * VSR_ERR_NOT_FOUND */
int vsr_pii_type_parse(const char *name, size_t len, vsr_pii_type_t *out);

/* Finds the entities of text[0..len) with a score of at least min_score
 * (0 for every candidate), in order of start, never overlapping, and
 * stores up to cap of them in out.  The threshold applies during the pass:
 * at each position the longest candidate that reaches it wins, so a lower
 * threshold may report a longer low-score entity where a higher one
 * reports a shorter one (callers filter with the threshold they mean).  *n_out is the number stored;
 * *truncated (may be NULL) is set to 1 when the pass stopped because out
 * was full, else 0.  VSR_OK | VSR_ERR_INVALID */
int vsr_pii_detect(const char *text, size_t len, float min_score, vsr_pii_entity_t *out, size_t cap,
                   size_t *n_out, int *truncated);

#endif
