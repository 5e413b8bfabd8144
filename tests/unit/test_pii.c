/* test_pii.c — the personal-data detector (src/models/pii.c): each type's
 * validation (checksums, ranges, shapes), cue words, boundaries inside
 * longer tokens and UTF-8 text, overlapping candidates, the entity cap, the
 * threshold, and linear behaviour on long hostile inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "models/pii.h"

static vsr_pii_entity_t ents[VSR_PII_MAX_ENTITIES];
static size_t n_ents;

static size_t detect(const char *text, float min)
{
    int tr = -1;
    assert_int_equal(vsr_pii_detect(text, strlen(text), min, ents, VSR_PII_MAX_ENTITIES, &n_ents, &tr), VSR_OK);
    assert_int_equal(tr, 0);
    return n_ents;
}

/* 1 when text has an entity of type t spanning exactly `span` at the default threshold */
static int found(const char *text, vsr_pii_type_t t, const char *span)
{
    detect(text, VSR_PII_DEFAULT_THRESHOLD);
    const char *at = strstr(text, span);
    assert_non_null(at);
    for (size_t k = 0; k < n_ents; k++)
        if (ents[k].type == t && ents[k].start == (size_t)(at - text) && ents[k].end == ents[k].start + strlen(span))
            return 1;
    return 0;
}

/* 1 when text has any entity of type t at the default threshold */
static int any(const char *text, vsr_pii_type_t t)
{
    detect(text, VSR_PII_DEFAULT_THRESHOLD);
    for (size_t k = 0; k < n_ents; k++)
        if (ents[k].type == t)
            return 1;
    return 0;
}

static void test_pii_type_names(void **state)
{
    (void)state;
    for (int t = 0; t < VSR_PII_N_TYPES; t++) {
        const char *name = vsr_pii_type_name((vsr_pii_type_t)t);
        vsr_pii_type_t back;
        assert_non_null(name);
        assert_int_equal(vsr_pii_type_parse(name, strlen(name), &back), VSR_OK);
        assert_int_equal(back, t);
    }
    vsr_pii_type_t x;
    assert_int_equal(vsr_pii_type_parse("PERSONS", 7, &x), VSR_ERR_NOT_FOUND);
    assert_int_equal(vsr_pii_type_parse("person", 6, &x), VSR_ERR_NOT_FOUND);
    assert_null(vsr_pii_type_name(VSR_PII_N_TYPES));
}

static void test_pii_bad_arguments(void **state)
{
    (void)state;
    size_t n = 9;
    assert_int_equal(vsr_pii_detect(NULL, 3, 0, ents, 4, &n, NULL), VSR_ERR_INVALID);
    assert_int_equal(n, 0);
    assert_int_equal(vsr_pii_detect("abc", 3, 0, NULL, 4, &n, NULL), VSR_ERR_INVALID);
    assert_int_equal(vsr_pii_detect(NULL, 0, 0, NULL, 0, &n, NULL), VSR_OK);
    assert_int_equal(n, 0);
    assert_int_equal(detect("", 0), 0);
}

static void test_pii_email(void **state)
{
    (void)state;
    assert_true(found("write to jane.doe+news@mail.example.co.uk today", VSR_PII_EMAIL_ADDRESS,
                      "jane.doe+news@mail.example.co.uk"));
    assert_true(found("a@b.io", VSR_PII_EMAIL_ADDRESS, "a@b.io"));
    assert_false(any("user@localhost is not routable", VSR_PII_EMAIL_ADDRESS)); /* no dot */
    assert_false(any("decorator @property and x@y", VSR_PII_EMAIL_ADDRESS));
    assert_false(any("bad .jane@example.com start", VSR_PII_EMAIL_ADDRESS) &&
                 found("bad .jane@example.com start", VSR_PII_EMAIL_ADDRESS, ".jane@example.com"));
    /* the e-mail wins over the domain inside it */
    detect("mail bob@example.com", VSR_PII_DEFAULT_THRESHOLD);
    assert_int_equal(n_ents, 1);
    assert_int_equal(ents[0].type, VSR_PII_EMAIL_ADDRESS);
}

static void test_pii_credit_card(void **state)
{
    (void)state;
    assert_true(found("card 4111 1111 1111 1111 please", VSR_PII_CREDIT_CARD, "4111 1111 1111 1111"));
    assert_true(found("amex 3782-822463-10005", VSR_PII_CREDIT_CARD, "3782-822463-10005"));
    assert_true(found("pay with 5555555555554444", VSR_PII_CREDIT_CARD, "5555555555554444"));
    assert_false(any("card 4111 1111 1111 1112 please", VSR_PII_CREDIT_CARD));  /* Luhn fails */
    assert_false(any("number 1234 5678 9012 3452", VSR_PII_CREDIT_CARD));       /* no issuer */
    assert_false(any("card 4111-1111 1111-1111", VSR_PII_CREDIT_CARD));         /* mixed separators */
    assert_false(any("card 41111111111111110", VSR_PII_CREDIT_CARD));            /* inside a longer run */
    assert_false(any("id 94111111111111111", VSR_PII_CREDIT_CARD));
}

static void test_pii_iban(void **state)
{
    (void)state;
    assert_true(found("IBAN DE89 3704 0044 0532 0130 00.", VSR_PII_IBAN_CODE, "DE89 3704 0044 0532 0130 00"));
    assert_true(found("to GB82WEST12345698765432", VSR_PII_IBAN_CODE, "GB82WEST12345698765432"));
    assert_false(any("to GB82WEST12345698765433", VSR_PII_IBAN_CODE)); /* mod 97 */
    assert_false(any("to DE89370400440532013", VSR_PII_IBAN_CODE));    /* too short for DE */
    assert_false(any("to DE8937040044053201300012", VSR_PII_IBAN_CODE)); /* runs on */
    assert_false(any("to QQ89370400440532013000", VSR_PII_IBAN_CODE)); /* no such country */
}

static void test_pii_ssn(void **state)
{
    (void)state;
    assert_true(found("my SSN is 536-90-4399", VSR_PII_US_SSN, "536-90-4399"));
    assert_true(found("ssn: 536904399", VSR_PII_US_SSN, "536904399"));
    assert_false(any("the number 536904399 alone", VSR_PII_US_SSN)); /* bare digits need a cue */
    assert_false(any("SSN 000-12-3456", VSR_PII_US_SSN));
    assert_false(any("SSN 666-12-3456", VSR_PII_US_SSN));
    assert_false(any("SSN 912-12-3456", VSR_PII_US_SSN));
    assert_false(any("SSN 536-00-3456", VSR_PII_US_SSN));
    assert_false(any("SSN 536-12-0000", VSR_PII_US_SSN));
    assert_false(any("SSN 111-11-1111", VSR_PII_US_SSN));
    assert_false(any("SSN 536-90-43991", VSR_PII_US_SSN));
}

static void test_pii_ip(void **state)
{
    (void)state;
    assert_true(found("server 10.0.0.254 is down", VSR_PII_IP_ADDRESS, "10.0.0.254"));
    assert_true(found("host 2001:db8::1 answers", VSR_PII_IP_ADDRESS, "2001:db8::1"));
    assert_true(found("ip ::1", VSR_PII_IP_ADDRESS, "::1"));
    assert_true(found("addr 2001:0db8:0000:0000:0000:ff00:0042:8329 ok", VSR_PII_IP_ADDRESS,
                      "2001:0db8:0000:0000:0000:ff00:0042:8329"));
    assert_true(found("mapped ::ffff:192.0.2.128 here", VSR_PII_IP_ADDRESS, "::ffff:192.0.2.128"));
    assert_false(any("server 10.0.0.256", VSR_PII_IP_ADDRESS));
    assert_false(any("server 10.00.0.1", VSR_PII_IP_ADDRESS));
    assert_false(any("release 1.2.3.4.5 is out", VSR_PII_IP_ADDRESS));
    assert_false(any("upgrade to version 4.2.0.1", VSR_PII_IP_ADDRESS));
    assert_false(any("tag v1.2.3.4", VSR_PII_IP_ADDRESS));
    assert_false(any("at 12:30:45 sharp", VSR_PII_IP_ADDRESS));
    assert_false(any("std::vector and 1::2::3", VSR_PII_IP_ADDRESS));
    assert_false(any("addr 1:2:3:4:5:6:7:8:9", VSR_PII_IP_ADDRESS));
}

static void test_pii_phone(void **state)
{
    (void)state;
    assert_true(found("call me at (415) 555-0132.", VSR_PII_PHONE_NUMBER, "(415) 555-0132"));
    assert_true(found("phone: 415.555.0132", VSR_PII_PHONE_NUMBER, "415.555.0132"));
    assert_true(found("ring +44 20 7946 0958", VSR_PII_PHONE_NUMBER, "+44 20 7946 0958"));
    assert_true(found("call 1-800-555-0199 now", VSR_PII_PHONE_NUMBER, "1-800-555-0199"));
    assert_false(any("ISBN 978-0-306-40615-7", VSR_PII_PHONE_NUMBER));
    assert_false(any("on 2024-01-15 we shipped", VSR_PII_PHONE_NUMBER));
    assert_false(any("area code 155-555-0132", VSR_PII_PHONE_NUMBER)); /* NANP area starts 2-9 */
    assert_false(any("total 4155550132 units", VSR_PII_PHONE_NUMBER)); /* bare digits need a cue */
    assert_true(any("my cell 4155550132", VSR_PII_PHONE_NUMBER));
    assert_false(any("order 415-555-0132 shipped", VSR_PII_PHONE_NUMBER));
}

static void test_pii_date(void **state)
{
    (void)state;
    assert_true(found("born on March 3, 1985 in Ohio", VSR_PII_DATE_TIME, "March 3, 1985"));
    assert_true(found("on 3rd of May 2020 we met", VSR_PII_DATE_TIME, "3rd of May 2020"));
    assert_true(found("DOB 07/04/1976", VSR_PII_DATE_TIME, "07/04/1976"));
    assert_true(found("meet Jan. 5, 2024 at 10:30 am", VSR_PII_DATE_TIME, "Jan. 5, 2024 at 10:30 am"));
    assert_false(any("created_at = \"2024-01-15\"", VSR_PII_DATE_TIME));
    assert_false(any("date of birth 13/13/1990", VSR_PII_DATE_TIME));
    assert_false(any("may 5 is lower case", VSR_PII_DATE_TIME));
    assert_false(any("born March 32, 1985", VSR_PII_DATE_TIME));
}

static void test_pii_street_address(void **state)
{
    (void)state;
    assert_true(found("I live at 221B Baker Street, London.", VSR_PII_STREET_ADDRESS, "221B Baker Street, London"));
    assert_true(found("ship to 1600 Pennsylvania Avenue NW, Washington, DC 20500 asap", VSR_PII_STREET_ADDRESS,
                      "1600 Pennsylvania Avenue NW, Washington, DC 20500"));
    assert_true(found("at 17 Orchard Lane, Apt 3B today", VSR_PII_STREET_ADDRESS, "17 Orchard Lane, Apt 3B"));
    assert_true(found("at 48 Willow Creek Road now", VSR_PII_STREET_ADDRESS, "48 Willow Creek Road"));
    assert_false(any("The 10 Most Common Mistakes", VSR_PII_STREET_ADDRESS));
    assert_false(any("I have 3 Avenue tickets", VSR_PII_STREET_ADDRESS));
}

static void test_pii_organization_person(void **state)
{
    (void)state;
    assert_true(found("invoice from Acme Widgets Inc. today", VSR_PII_ORGANIZATION, "Acme Widgets Inc."));
    assert_true(found("I work at Initech now", VSR_PII_ORGANIZATION, "Initech"));
    assert_true(found("Procter & Gamble Co. said", VSR_PII_ORGANIZATION, "Procter & Gamble Co."));
    assert_true(found("My name is Sarah Connor.", VSR_PII_PERSON, "Sarah Connor"));
    assert_true(found("ask John Smith about it", VSR_PII_PERSON, "John Smith"));
    assert_true(found("Dear Mr. Thompson, thanks", VSR_PII_PERSON, "Thompson"));
    assert_true(found("record for Kevin O'Brien here", VSR_PII_PERSON, "Kevin O'Brien"));
    assert_true(found("Hi Maria, the report?", VSR_PII_PERSON, "Maria"));
    assert_true(found("a card for my grandson Oliver today", VSR_PII_PERSON, "Oliver"));
    assert_true(found("Thanks again, Rachel!", VSR_PII_PERSON, "Rachel"));
    assert_true(found("I think Amanda from HR knows", VSR_PII_PERSON, "Amanda"));
    assert_true(found("a gift for Uncle Bill", VSR_PII_PERSON, "Uncle Bill"));
    assert_false(any("I think Oliver is fine", VSR_PII_PERSON)); /* one given name, no cue */
    assert_false(any("Is Claude better than Gemini at coding? I asked Claude and it said no.", VSR_PII_PERSON));
    assert_false(any("Explain the Monty Hall problem.", VSR_PII_PERSON));
    assert_false(any("Write a Python function in JavaScript.", VSR_PII_PERSON));
    assert_false(any("What do you think about The Beatles?", VSR_PII_PERSON));
}

/* names out of the gazetteer found by their context, and the names in
 * ordinary questions that are not someone's personal data */
static void test_pii_person_context(void **state)
{
    (void)state;
    /* a salutation names the person greeted, known name or not, comma or not */
    assert_true(found("Dear Okonkwo, your rent for May is overdue.", VSR_PII_PERSON, "Okonkwo"));
    assert_true(found("Dear Rene the payment has not arrived", VSR_PII_PERSON, "Rene"));
    assert_false(any("Dear Diary, today was long.", VSR_PII_PERSON));
    assert_false(any("Dear Colleagues, the office is closed.", VSR_PII_PERSON));
    /* a relation noun after a possessive */
    assert_true(found("Write a birthday note for my coworker Dmitri please", VSR_PII_PERSON, "Dmitri"));
    assert_true(found("Can our tenant Abimbola pay late?", VSR_PII_PERSON, "Abimbola"));
    /* places that are given names too, historical figures, quiz options, case names */
    assert_false(any("What started the Hundred Years' War between England and France?", VSR_PII_PERSON));
    assert_false(any("Describe the Protestant Reformation and Martin Luther's role.", VSR_PII_PERSON));
    assert_false(any("Explain utilitarianism as developed by John Stuart Mill.", VSR_PII_PERSON));
    assert_false(any("The speaker was most likely: A) Woodrow Wilson B) Warren Harding", VSR_PII_PERSON));
    assert_false(any("What rights does a suspect have under Miranda v. Arizona?", VSR_PII_PERSON));
    /* the same names with a cue stay personal data */
    assert_true(found("My name is Martin Luther and I need a refund.", VSR_PII_PERSON, "Martin Luther"));
    assert_true(found("Please ship it to my sister France tomorrow", VSR_PII_PERSON, "France"));
}

static void test_pii_domain_url(void **state)
{
    (void)state;
    assert_true(found("visit example.org for more", VSR_PII_DOMAIN_NAME, "example.org"));
    assert_true(found("see https://example.com/a?b=c).", VSR_PII_URL, "https://example.com/a?b=c"));
    assert_false(any("edit setup.py and README.md", VSR_PII_DOMAIN_NAME));
    assert_false(any("call os.path.join and self.info", VSR_PII_DOMAIN_NAME));
    assert_false(any("use df.info() here", VSR_PII_DOMAIN_NAME));
}

static void test_pii_utf8_and_boundaries(void **state)
{
    (void)state;
    /* entities at the very start and end, between multi-byte characters */
    const char *t = "jöhn@exämple.com";
    detect(t, VSR_PII_DEFAULT_THRESHOLD);
    assert_int_equal(n_ents, 0); /* non-ASCII domains are not matched */
    assert_true(found("名前：José García、電話 +34 612 345 678。", VSR_PII_PHONE_NUMBER, "+34 612 345 678"));
    assert_true(found("4111111111111111", VSR_PII_CREDIT_CARD, "4111111111111111"));
    assert_true(found("«a@b.de»", VSR_PII_EMAIL_ADDRESS, "a@b.de"));
    assert_true(found("Élodie Dupont est là", VSR_PII_PERSON, "Élodie Dupont"));
    /* offsets always fall on UTF-8 boundaries */
    const char *mixed = "Ünïcödé Müller wohnt in 12 Hauptstraße, ruft +49 30 1234567 an; José@x.com";
    detect(mixed, 0);
    for (size_t k = 0; k < n_ents; k++) {
        assert_true((mixed[ents[k].start] & 0xC0) != 0x80);
        assert_true(mixed[ents[k].end] == 0 || (mixed[ents[k].end] & 0xC0) != 0x80);
        assert_true(ents[k].end > ents[k].start);
    }
    /* NUL bytes are ordinary bytes */
    static const char nul[] = "x\0call 415-555-0132";
    size_t n;
    assert_int_equal(vsr_pii_detect(nul, sizeof nul - 1, 0.5f, ents, 8, &n, NULL), VSR_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ents[0].start, 7);
}

static void test_pii_no_overlap_in_order(void **state)
{
    (void)state;
    const char *t = "Contact John Smith, john.smith@acme.com, (212) 555-0100, 1 Main Street, at Acme Corp "
                    "from 10.1.2.3; https://acme.com/john.smith@acme.com";
    detect(t, 0);
    assert_true(n_ents >= 6);
    for (size_t k = 0; k < n_ents; k++) {
        assert_true(ents[k].score > 0 && ents[k].score <= 1);
        if (k)
            assert_true(ents[k].start >= ents[k - 1].end);
    }
    /* the URL swallows the address inside it */
    assert_int_equal(ents[n_ents - 1].type, VSR_PII_URL);
}

static void test_pii_threshold_and_cap(void **state)
{
    (void)state;
    const char *t = "numbers 415-555-0132 and 415-555-0133 and 415-555-0134";
    size_t all = detect(t, 0);
    assert_int_equal(all, 3);
    assert_int_equal(detect(t, 0.995f), 0);
    size_t n;
    int tr = 0;
    assert_int_equal(vsr_pii_detect(t, strlen(t), 0, ents, 2, &n, &tr), VSR_OK);
    assert_int_equal(n, 2);
    assert_int_equal(tr, 1);
    assert_int_equal(vsr_pii_detect(t, strlen(t), 0, ents, 0, &n, &tr), VSR_OK);
    assert_int_equal(n, 0);
    assert_int_equal(tr, 1);
}

static void test_pii_long_hostile_inputs(void **state)
{
    (void)state;
    /* long runs that every scanner starts on: must stay linear and bounded */
    size_t len = 1 << 20;
    char *buf = malloc(len + 1);
    assert_non_null(buf);
    static const char *const fills[] = {"1", "1.", "1-", "a", "A", "Aa ", "::", ":a", "a@", "1 ", "Ab Cd ",
                                        "DE89", "(1) ", "+1 ", "https://a", "4111 "};
    for (size_t f = 0; f < sizeof fills / sizeof fills[0]; f++) {
        size_t fl = strlen(fills[f]);
        for (size_t k = 0; k < len; k++)
            buf[k] = fills[f][k % fl];
        buf[len] = 0;
        size_t n;
        int tr;
        assert_int_equal(vsr_pii_detect(buf, len, 0, ents, VSR_PII_MAX_ENTITIES, &n, &tr), VSR_OK);
        assert_true(n <= VSR_PII_MAX_ENTITIES);
        for (size_t k = 0; k < n; k++)
            assert_true(ents[k].end - ents[k].start <= VSR_PII_MAX_SPAN);
    }
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pii_type_names),
        cmocka_unit_test(test_pii_bad_arguments),
        cmocka_unit_test(test_pii_email),
        cmocka_unit_test(test_pii_credit_card),
        cmocka_unit_test(test_pii_iban),
        cmocka_unit_test(test_pii_ssn),
        cmocka_unit_test(test_pii_ip),
        cmocka_unit_test(test_pii_phone),
        cmocka_unit_test(test_pii_date),
        cmocka_unit_test(test_pii_street_address),
        cmocka_unit_test(test_pii_organization_person),
        cmocka_unit_test(test_pii_person_context),
        cmocka_unit_test(test_pii_domain_url),
        cmocka_unit_test(test_pii_utf8_and_boundaries),
        cmocka_unit_test(test_pii_no_overlap_in_order),
        cmocka_unit_test(test_pii_threshold_and_cap),
        cmocka_unit_test(test_pii_long_hostile_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
