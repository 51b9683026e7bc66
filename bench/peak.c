/* Run one command and write how it ran to a file: its wall seconds, its user + system seconds,
 * its peak resident memory in KiB (the kernel's accounting of the reaped child, wait4: the
 * largest process among those it waited for) and its exit status (128 + N for signal N).
 *
 *     peak OUTFILE COMMAND [ARG...]
 *
 * bench/pairs.py builds it with cc (the C compiler Rust links with) and runs every measured
 * command through it: a command started straight from Python would count Python's own memory as
 * its peak (a child starts as a copy of its parent); started from this small program, it counts
 * this program's, well under a MiB. */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double seconds(struct timeval t) { return t.tv_sec + t.tv_usec / 1e6; }

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s OUTFILE COMMAND [ARG...]\n", argv[0]);
        return 2;
    }
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 2;
    }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        perror(argv[2]);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) {
        perror("wait4");
        return 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    double wall = (end.tv_sec - start.tv_sec) + (end.tv_nsec - start.tv_nsec) / 1e9;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    FILE *out = fopen(argv[1], "w");
    if (out == NULL) {
        perror(argv[1]);
        return 2;
    }
    fprintf(out, "%.6f %.6f %ld %d\n", wall, seconds(ru.ru_utime) + seconds(ru.ru_stime),
            ru.ru_maxrss, code);
    return fclose(out) == 0 ? 0 : 2;
}
