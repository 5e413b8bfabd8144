/*
 * labeled — the labelled text sets under data/ (JSON Lines, one
 * {"label":"..","text":".."} object a line; or, for a path ending in ".tsv",
 * one label<TAB>text line each, '#' lines being comments; blank lines are
 * skipped), and the
 * SHA-256 of a file, shared by the head trainer (tools/models/train_head.c)
 * and the quality evaluators (bench/quality/).
 *
 * Ownership: a set owns its strings; labeled_free() releases them.
 * Single-threaded command-line helpers: errors are printed to stderr.
 */
#ifndef VSR_TOOLS_LABELED_H
#define VSR_TOOLS_LABELED_H

#include <stddef.h>

#define LABELED_MAX_ITEMS 100000
#define LABELED_MAX_LINE (64u << 10)

typedef struct {
    size_t n;
    char **label, **text;
} labeled_t;

/* 0, or -1 (message printed) on a missing file, bad JSON, a missing field,
 * an empty text or more than LABELED_MAX_ITEMS lines */
int labeled_load(const char *path, labeled_t *out);
void labeled_free(labeled_t *s);

/* hex[65]: the SHA-256 of the file's bytes.  0 or -1. */
int labeled_sha256_file(const char *path, char hex[65]);

#endif
