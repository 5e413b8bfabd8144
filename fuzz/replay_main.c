/* replay_main.c — runs a libFuzzer target's entry point over every file of a
 * corpus directory, so the checked-in corpus is replayed by ctest under the
 * sanitizers without libFuzzer.  Exit 0 when every input ran; 1 when the
 * corpus is missing or empty (a replay that ran nothing must not pass). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    DIR *d = opendir(argv[1]);
    if (d == NULL) {
        perror(argv[1]);
        return 1;
    }
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", argv[1], e->d_name);
        FILE *f = fopen(path, "rb");
        if (f == NULL)
            continue;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc(len > 0 ? (size_t)len : 1);
        size_t got = fread(buf, 1, (size_t)(len > 0 ? len : 0), f);
        fclose(f);
        LLVMFuzzerTestOneInput(buf, got);
        free(buf);
        n++;
    }
    closedir(d);
    printf("replayed %d inputs from %s\n", n, argv[1]);
    return n > 0 ? 0 : 1;
}
