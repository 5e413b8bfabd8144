/*
 * fuzz_tools_db.c — the tools database loader (vsr_tools_db_parse,
 * src/config/cfg_tools.c) over arbitrary input.  The JSON itself is read by
 * the project's JSON parser (fuzzed in fuzz_json.c); this target covers the
 * shape checks and the error positions on top of it.  Checks, beyond memory
 * safety: an accepted database has at most VSR_TOOLS_DB_MAX_TOOLS tools,
 * each with a non-empty name, a text that starts with it, and its tool
 * object as JSON that parses; a refused one says why in FILE:LINE:COL lines.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "json/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "fuzz_tools_db: check failed: %s (line %d)\n", #cond, __LINE__); \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vsr_pool_t pool;
    vsr_pool_init(&pool);
    vsr_buf_t err;
    vsr_buf_init(&err, 0);
    vsr_tools_db_t db;
    int rc = vsr_tools_db_parse("db.json", (const char *)data, size, &pool, &db, &err);
    if (rc == VSR_OK) {
        CHECK(err.len == 0);
        CHECK(db.n <= VSR_TOOLS_DB_MAX_TOOLS);
        for (size_t i = 0; i < db.n; i++) {
            const vsr_tool_entry_t *t = &db.tools[i];
            CHECK(t->name && t->name[0]);
            CHECK(strncmp(t->text, t->name, strlen(t->name)) == 0);
            vsr_json_t j;
            CHECK(vsr_json_parse(&j, t->json.p, t->json.len, NULL) == VSR_OK);
            CHECK(vsr_json_type(&j, 0) == VSR_JSON_OBJECT);
            vsr_json_free(&j);
        }
    } else {
        CHECK(rc == VSR_ERR_INVALID);
        CHECK(err.len > 0 && strncmp(err.data, "db.json:", 8) == 0);
    }
    vsr_buf_free(&err);
    vsr_pool_free(&pool);
    return 0;
}
