/* A stand-in for Tango's autodriver (autolab/Tango, autodriver/), written from its documented behaviour
 * for tests/test_container.py, which cannot download Tango: a setuid-root program that the `autolab`
 * user calls as `autodriver -u NPROC -f FSIZE -t SECONDS -o OUTPUT_BYTES DIR`. It moves DIR into the home
 * of the `autograde` user, gives it to that user, and runs `make` there as `autograde` with RLIMIT_NPROC and
 * RLIMIT_FSIZE, its output in DIR/../output.log; then prints "Autodriver: Job exited with status N" (or
 * "Autodriver: Job timed out after T seconds"), the output (its head and tail when over OUTPUT_BYTES), and
 * ends every process of `autograde` with pkill (procps), as the real one does. */
#define _GNU_SOURCE
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

/* The `autograde` user from /etc/passwd, read here (not through NSS) so that a static build runs in any image. */
static int grading_user(uid_t *uid, gid_t *gid, char *home, size_t size) {
    char line[1024];
    FILE *f = fopen("/etc/passwd", "r");
    if (!f) return -1;
    while (fgets(line, sizeof line, f)) {
        char *rest = line, *field[6];
        for (int i = 0; i < 6; i++) field[i] = strsep(&rest, ":");  /* empty fields kept (strtok skips them) */
        char *name = field[0], *u = field[2], *g = field[3], *dir = field[5];
        if (name && u && g && dir && strcmp(name, "autograde") == 0) {
            *uid = (uid_t)atol(u); *gid = (gid_t)atol(g);
            snprintf(home, size, "%s", dir);
            fclose(f);
            return 0;
        }
    }
    fclose(f);
    return -1;
}

static int call(char *const argv[]) {
    pid_t pid = fork();
    int status = 0;
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    if (pid < 0 || waitpid(pid, &status, 0) < 0) return 127;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 127;
}

static void dump(const char *path, long cap) {
    FILE *f = fopen(path, "rb");
    if (!f) { printf("Autodriver: Error opening output file\n"); exit(3); }
    fseek(f, 0, SEEK_END);
    long size = ftell(f), from = 0, part = size;
    char buf[4096];
    fflush(stdout);
    for (int pass = 0; pass < 2; pass++) {
        if (cap > 0 && size > cap) {
            part = cap / 2;
            from = pass == 0 ? 0 : size - part;
            if (pass == 1) { printf("\n...[excess bytes elided]...\n"); fflush(stdout); }
        } else if (pass == 1) break;
        fseek(f, from, SEEK_SET);
        for (long left = part; left > 0;) {
            size_t n = fread(buf, 1, left < (long)sizeof buf ? (size_t)left : sizeof buf, f);
            if (n == 0) break;
            fwrite(buf, 1, n, stdout);
            left -= (long)n;
        }
        fflush(stdout);
    }
    fclose(f);
}

int main(int argc, char **argv) {
    long nproc = 0, fsize = 0, timeout = 0, osize = 0;
    int opt;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (getuid() == 0) { printf("Autodriver: Autodriver should not be run as root.\n"); return 1; }
    uid_t uid;
    gid_t gid;
    char home[512], *name = "autograde";
    if (grading_user(&uid, &gid, home, sizeof home) < 0) { printf("Autodriver: Invalid grading user\n"); return 3; }
    while ((opt = getopt(argc, argv, "u:f:t:o:")) != -1) {
        long v = atol(optarg);
        if (opt == 'u') nproc = v; else if (opt == 'f') fsize = v; else if (opt == 't') timeout = v;
        else if (opt == 'o') osize = v; else return 1;
    }
    if (optind != argc - 1) { printf("Autodriver: usage: autodriver [-u n] [-f n] [-t s] [-o n] DIR\n"); return 1; }
    char *dir = argv[optind], owner[64];
    char *mv[] = {"/bin/mv", "-f", dir, home, NULL};
    if (call(mv) != 0 || chdir(home) < 0) { printf("Autodriver: Error moving directory\n"); return 3; }
    snprintf(owner, sizeof owner, "%d:%d", (int)uid, (int)gid);
    char *chown_argv[] = {"/bin/chown", "-R", owner, dir, NULL};
    if (call(chown_argv) != 0) { printf("Autodriver: Error chowning directory\n"); return 3; }
    pid_t child = fork();
    if (child == 0) {
        struct rlimit np = {nproc, nproc}, fs = {fsize, fsize};
        if ((nproc && setrlimit(RLIMIT_NPROC, &np) < 0) || (fsize && setrlimit(RLIMIT_FSIZE, &fs) < 0)
            || setgroups(1, &gid) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0) {
            printf("Autodriver: Error dropping privileges\n");
            _exit(3);
        }
        int fd = open("output.log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0 || chdir(dir) < 0) _exit(3);
        close(fd);
        execl("/usr/bin/make", "make", (char *)NULL);
        _exit(3);
    }
    int status = 0, killed = 0;
    struct timespec start, now, nap = {0, 50 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (waitpid(child, &status, WNOHANG) == 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (timeout && now.tv_sec - start.tv_sec >= timeout) {
            kill(child, SIGKILL);
            waitpid(child, &status, 0);
            killed = 1;
            break;
        }
        nanosleep(&nap, NULL);
    }
    if (killed) printf("Autodriver: Job timed out after %ld seconds\n", timeout);
    else printf("Autodriver: Job exited with status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128);
    dump("output.log", osize);
    char *pkill_int[] = {"/usr/bin/pkill", "-INT", "-u", name, NULL};
    char *pkill_kill[] = {"/usr/bin/pkill", "-KILL", "-u", name, NULL};
    for (int ret = call(pkill_int), tries = 0; ret != 1; ret = call(pkill_kill), tries++) {
        if (ret > 1 || tries > 5) { printf("Autodriver: Error killing user processes\n"); return 3; }
        sleep(1);
    }
    char *find_argv[] = {"/usr/bin/find", ".", "/tmp", "/var/tmp", "-user", name, "-delete", NULL};
    if (call(find_argv) != 0) { printf("Autodriver: Error deleting user's files\n"); return 3; }
    return killed ? 2 : 0;
}
