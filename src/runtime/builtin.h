/* builtin.h — data files compiled into the binary (cmake/embed.cmake writes
 * them from data/ at build time).  Each is followed by a NUL byte that its
 * length does not count. */
#ifndef VSR_RUNTIME_BUILTIN_H
#define VSR_RUNTIME_BUILTIN_H

#include <stddef.h>

extern const unsigned char vsr_builtin_domain_head[]; /* data/domains/domain.head */
extern const size_t vsr_builtin_domain_head_len;
extern const unsigned char vsr_builtin_jailbreak_patterns[]; /* data/jailbreak/jailbreak_patterns.txt */
extern const size_t vsr_builtin_jailbreak_patterns_len;
extern const unsigned char vsr_builtin_benign_patterns[]; /* data/jailbreak/benign_patterns.txt */
extern const size_t vsr_builtin_benign_patterns_len;
extern const unsigned char vsr_builtin_jailbreak_head[]; /* data/jailbreak/jailbreak.head */
extern const size_t vsr_builtin_jailbreak_head_len;
extern const unsigned char vsr_builtin_jailbreak_lexical[]; /* data/jailbreak/jailbreak_lexical.json */
extern const size_t vsr_builtin_jailbreak_lexical_len;

#endif /* VSR_RUNTIME_BUILTIN_H */
