/* use_vocab.h — a vocabulary-only USE-lite model file in memory (no
 * tensors), in the format tools/models/use_lite_convert.py writes and
 * vsr_use_load_mem() reads: for the tokenizer's unit tests and fuzz target. */
#ifndef VSR_TESTS_USE_VOCAB_H
#define VSR_TESTS_USE_VOCAB_H

#include <stdint.h>
#include <string.h>

typedef struct {
    const char *piece; /* UTF-8 */
    double score;
} use_piece_t;

/* Writes the n pieces (ids 0..n-1, in order) as a model file into f (8-byte
 * aligned, large enough: 64 + 16 n + the pieces' bytes); returns its size. */
static inline size_t use_vocab_file(uint8_t *f, const use_piece_t *const *pieces, uint32_t n)
{
    uint64_t voff = 64, text = voff + (uint64_t)n * 16, tlen = 0;
    memset(f, 0, 64);
    for (uint32_t i = 0; i < n; i++) {
        const use_piece_t *p = pieces[i];
        uint16_t bl = (uint16_t)strlen(p->piece), u16 = 0; /* its length in bytes and in UTF-16 units */
        for (size_t k = 0; k < bl; k++) {
            uint8_t c = (uint8_t)p->piece[k];
            if ((c & 0xC0) != 0x80)
                u16 += c >= 0xF0 ? 2 : 1;
        }
        uint32_t off = (uint32_t)tlen;
        memcpy(f + voff + i * 16, &p->score, 8);
        memcpy(f + voff + i * 16 + 8, &off, 4);
        memcpy(f + voff + i * 16 + 12, &bl, 2);
        memcpy(f + voff + i * 16 + 14, &u16, 2);
        memcpy(f + text + tlen, p->piece, bl);
        tlen += bl;
    }
    uint64_t total = text + tlen, vbytes = total - voff;
    uint32_t one = 1, zero = 0;
    memcpy(f, "VSRMUSE1", 8);
    memcpy(f + 8, &one, 4);
    memcpy(f + 12, &zero, 4);
    memcpy(f + 16, &n, 4);
    memcpy(f + 20, &zero, 4);
    memcpy(f + 24, &voff, 8);
    memcpy(f + 32, &vbytes, 8);
    memcpy(f + 40, &total, 8);
    return (size_t)total;
}

#endif
