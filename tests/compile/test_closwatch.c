/*
 * The process's memo of closure checks (lib/compile/closwatch.c) in one
 * long-lived process: after a hit the memo serves, each way a header can
 * change between two compiles is a miss giving what plain NVRTC reading the
 * disk gives: an edit that keeps size and mtime, a replacement by rename, a
 * header made earlier on the -I path, an edit through a hard link made in
 * another directory, a symlinked -I directory retargeted, an edit in a
 * forked child's lifetime (the child must not take the parent's events),
 * a directory of the -I path mounted over, the memo's inotify descriptor
 * closed by the program and its number taken by a file; and a second
 * kernel over the same closure, or the same kernel named in another
 * directory, is served by the memo at once. A second closure sharing a
 * header takes what the first's watch found of it (reuse_*): the header
 * edited, renamed away, replaced or its entry re-pointed between the two
 * watches, then edited through a link elsewhere, is still seen, and so is
 * a header made in an -I directory replaced between them.
 *
 *   test_closwatch [CASE...]          the cases (all without arguments)
 *   test_closwatch netfs DIR SERVER   DIR: a network mount of SERVER (sshfs,
 *                                     tests/compile/test_closwatch_netfs.py);
 *                                     edits made at SERVER, as another host
 *                                     would, are seen through DIR
 *
 * Files look 10 s old to kcache (KCACHE_TEST_CLOCK_SHIFT_NS), so a check
 * trusts them and the memo is used; every edit here changes ctime. Skips
 * (77) without a toolkit.
 */
#include <dirent.h>
#include <stddef.h>
#include <fcntl.h>
#include <kcache/compile.h>
#include <sys/stat.h>
#include <errno.h>
#include <sys/wait.h>
#include <sched.h>
#include <sys/mount.h>

#include "compile/manifest.h"
#include "compiletest.h"
#include "cuda/toolkit.h"

#define SEED "--frandom-seed=0x6b63"

static const kc_nvrtc *api;
static kcache_compiler *comp;

/* One case's tree: root/src/kern.cu includes <val.h>, looked for in -I first then -I second. */
struct tree {
    char root[600], src[700], first[700], second[700], val[800];
    char inc[2][720];
    const char *opts[3];
    char old_text[32], new_text[32]; /* val.h before and after, of one size; a case's own */
    char new_val[16];
};

static int n_trees; /* trees made: each case's values its own */

static void tree_init(struct tree *t, const char *base, const char *name)
{
    n_trees++;
    snprintf(t->new_val, sizeof(t->new_val), "%d", 54300 + n_trees);
    snprintf(t->old_text, sizeof(t->old_text), "#define VAL %d\n", 12300 + n_trees);
    snprintf(t->new_text, sizeof(t->new_text), "#define VAL %s\n", t->new_val);
    snprintf(t->root, sizeof(t->root), "%s/%s", base, name);
    snprintf(t->src, sizeof(t->src), "%s/src/kern.cu", t->root);
    snprintf(t->first, sizeof(t->first), "%s/first", t->root);
    snprintf(t->second, sizeof(t->second), "%s/second", t->root);
    snprintf(t->val, sizeof(t->val), "%s/val.h", t->second);
    test_sh("mkdir -p '%s/src' '%s' '%s'", t->root, t->first, t->second);
    test_write_text(t->src, "#include <val.h>\n"
                            "extern \"C\" __global__ void k(int *o) { *o = VAL; }\n");
    test_write_text(t->val, t->old_text);
    snprintf(t->inc[0], sizeof(t->inc[0]), "-I%s", t->first);
    snprintf(t->inc[1], sizeof(t->inc[1]), "-I%s", t->second);
    t->opts[0] = t->inc[0];
    t->opts[1] = t->inc[1];
    t->opts[2] = SEED;
}

static kcache_result *compile_flags(const struct tree *t, unsigned flags)
{
    kcache_request q = KCACHE_REQUEST_INIT;
    q.flags = flags;
    q.source_path = t->src;
    q.arch = "compute_90";
    q.output = KCACHE_KIND_PTX;
    q.options = t->opts;
    q.n_options = 3;
    kcache_result *r = NULL;
    kcache_compiler_compile(&r, comp, &q);
    REQUIRE(r);
    return r;
}

static kcache_result *compile(const struct tree *t)
{
    return compile_flags(t, 0);
}

/* A compile that must succeed, as a hit or a miss. */
static void compile_expect(const struct tree *t, int hit)
{
    kcache_result *r = compile(t);
    CHECK(r->status == 0 && !r->hit == !hit);
    kcache_result_free(r);
}

/* Plain NVRTC reading the disk: PTX without its NUL, or NULL. */
static char *plain(const struct tree *t, size_t *size)
{
    size_t n;
    uint8_t *src = test_slurp(t->src, &n);
    REQUIRE(src);
    src[n] = '\0';
    const char *argv[] = {"-arch=compute_90", t->opts[0], t->opts[1], t->opts[2]};
    nvrtcProgram p;
    REQUIRE(api->CreateProgram(&p, (const char *)src, t->src, 0, NULL, NULL) == NVRTC_SUCCESS);
    char *ptx = NULL;
    if (api->CompileProgram(p, 4, argv) == NVRTC_SUCCESS) {
        REQUIRE(api->GetPTXSize(p, size) == NVRTC_SUCCESS);
        REQUIRE((ptx = malloc(*size)) != NULL);
        REQUIRE(api->GetPTX(p, ptx) == NVRTC_SUCCESS);
        if (*size && ptx[*size - 1] == '\0')
            (*size)--;
    }
    api->DestroyProgram(&p);
    free(src);
    return ptx;
}

static kc_closwatch_counts memo(void)
{
    kc_closwatch_counts c;
    kc_closwatch_counts_get(&c);
    return c;
}

static uint64_t memo_hits(void)
{
    return memo().hits;
}

/*
 * A miss, a hit (the closure's first check in the process), a hit that
 * watches and remembers it, a hit (with memo: one the memo serves).
 */
static void warm(const char *what, const struct tree *t, int memo)
{
    kcache_result *r = compile(t);
    CHECK(r->status == 0 && !r->hit);
    kcache_result_free(r);
    for (int i = 0; i < 2; i++) {
        r = compile(t);
        CHECK(r->status == 0 && r->hit);
        kcache_result_free(r);
    }
    uint64_t before = memo_hits();
    r = compile(t);
    CHECK(r->status == 0 && r->hit);
    if (memo && memo_hits() == before)
        fprintf(stderr, "%s: the memo did not serve the fourth compile\n", what);
    CHECK(!memo || memo_hits() > before);
    kcache_result_free(r);
}

/* The count of memo() at offset field (offsetof(kc_closwatch_counts, ...)). */
static uint64_t count_at(size_t field)
{
    kc_closwatch_counts c = memo();
    uint64_t v;
    memcpy(&v, (const char *)&c + field, sizeof(v));
    return v;
}

/* warm(), over which the count at field must not move: "what: N <moved>" if it does. */
static void warm_unmoved(const char *what, const struct tree *t, size_t field, const char *moved)
{
    uint64_t before = count_at(field);
    warm(what, t, 1);
    if (count_at(field) != before)
        fprintf(stderr, "%s: %llu %s\n", what, (unsigned long long)(count_at(field) - before),
                moved);
    CHECK(count_at(field) == before);
}

/* After the change: NVRTC's bytes, which hold the new value; want_miss: not from the cache. */
static int sees_change(const char *what, const struct tree *t, int want_miss)
{
    kcache_result *r = compile(t);
    size_t n = 0;
    char *want = plain(t, &n);
    int ok = want && memmem(want, n, t->new_val, 5) && r->status == 0 && r->size == n &&
             !memcmp(r->data, want, n) && !(want_miss && r->hit);
    if (!ok)
        fprintf(stderr, "%s: kcache gave %s (%s, status %d), NVRTC %s\n", what,
                r->status == 0 && !memmem(r->data, r->size, t->new_val, 5) ? "the old kernel"
                                                                              : "the new one",
                r->hit ? "a hit" : "a miss", r->status, want ? "the new one" : "nothing");
    free(want);
    kcache_result_free(r);
    return ok;
}

/* path's bytes replaced by text of the same size, its mtime (and atime) put back. */
static void edit_keeping_times(const char *path, const char *text)
{
    struct stat st;
    REQUIRE(stat(path, &st) == 0);
    int fd = open(path, O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(pwrite(fd, text, strlen(text), 0) == (ssize_t)strlen(text));
    close(fd);
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    REQUIRE(utimensat(AT_FDCWD, path, ts, 0) == 0);
    struct stat now;
    REQUIRE(stat(path, &now) == 0 && now.st_size == st.st_size);
}

static void case_same_size_mtime(void)
{
    struct tree t;
    tree_init(&t, test_dir(), "same_size_mtime");
    warm("same_size_mtime", &t, 1);
    edit_keeping_times(t.val, t.new_text);
    CHECK(sees_change("same_size_mtime", &t, 1));
}

static void case_rename(void)
{
    struct tree t;
    char tmp[900];
    tree_init(&t, test_dir(), "rename");
    warm("rename", &t, 1);
    /* Made elsewhere: in the -I directory only its arrival is seen. */
    snprintf(tmp, sizeof(tmp), "%s/rename-staging.h", test_dir());
    struct stat st;
    REQUIRE(stat(t.val, &st) == 0);
    test_write_text(tmp, t.new_text);
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    REQUIRE(utimensat(AT_FDCWD, tmp, ts, 0) == 0);
    REQUIRE(rename(tmp, t.val) == 0);
    CHECK(sees_change("rename", &t, 1));
}

static void case_earlier_on_path(void)
{
    struct tree t;
    char earlier[800];
    tree_init(&t, test_dir(), "earlier");
    warm("earlier", &t, 1);
    snprintf(earlier, sizeof(earlier), "%s/val.h", t.first);
    test_write_text(earlier, t.new_text);
    CHECK(sees_change("earlier", &t, 1));
}

/* A link made after the memo, in a directory kcache knows nothing of, edited through. */
static void case_hard_link(void)
{
    struct tree t;
    char other[700], link_path[800];
    tree_init(&t, test_dir(), "hard_link");
    warm("hard_link", &t, 1);
    snprintf(other, sizeof(other), "%s/hard_link-elsewhere", test_dir());
    snprintf(link_path, sizeof(link_path), "%s/alias.h", other);
    REQUIRE(mkdir(other, 0700) == 0);
    REQUIRE(link(t.val, link_path) == 0);
    edit_keeping_times(link_path, t.new_text);
    CHECK(sees_change("hard_link", &t, 1));
}

/* -I root/link, link -> v1, retargeted to v2: val.h of the same size and mtime in both. */
static void case_symlink_dir(void)
{
    struct tree t;
    char v1[700], v2[700], link_path[700], tmp[700], f1[800], f2[800];
    tree_init(&t, test_dir(), "symlink_dir");
    snprintf(v1, sizeof(v1), "%s/v1", t.root);
    snprintf(v2, sizeof(v2), "%s/v2", t.root);
    snprintf(link_path, sizeof(link_path), "%s/link", t.root);
    snprintf(tmp, sizeof(tmp), "%s/link.new", t.root);
    snprintf(f1, sizeof(f1), "%s/val.h", v1);
    snprintf(f2, sizeof(f2), "%s/val.h", v2);
    REQUIRE(mkdir(v1, 0700) == 0 && mkdir(v2, 0700) == 0);
    test_write_text(f1, t.old_text);
    test_write_text(f2, t.new_text);
    struct stat st;
    REQUIRE(stat(f1, &st) == 0);
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    REQUIRE(utimensat(AT_FDCWD, f2, ts, 0) == 0);
    REQUIRE(symlink("v1", link_path) == 0);
    REQUIRE(unlink(t.val) == 0);
    snprintf(t.inc[1], sizeof(t.inc[1]), "-I%s", link_path);
    warm("symlink_dir", &t, 1);
    REQUIRE(symlink("v2", tmp) == 0);
    REQUIRE(rename(tmp, link_path) == 0);
    CHECK(sees_change("symlink_dir", &t, 1));
}

/*
 * -I root/alink, alink -> ROOT/link (absolute), link -> real (relative),
 * the kernel including <val.h> and <sub/one.h> from it: the watch walks to
 * its directories through the links as the kernel does (with the
 * directories of the walk before, not each from "/" on its own), and link
 * retargeted to real2 (val.h of the same size and mtime) is still seen.
 */
static void case_symlink_chain(void)
{
    struct tree t;
    char real[2][700], f[4][1500], alink[700], link_path[700], tmp[700];
    tree_init(&t, test_dir(), "symlink_chain");
    for (int i = 0; i < 2; i++) {
        snprintf(real[i], sizeof(real[i]), "%s/%s", t.root, i ? "real2" : "real");
        snprintf(f[2 * i], sizeof(f[0]), "%s/val.h", real[i]);
        snprintf(f[2 * i + 1], sizeof(f[0]), "%s/sub/one.h", real[i]);
        test_sh("mkdir -p '%s/sub'", real[i]);
        test_write_text(f[2 * i], i ? t.new_text : t.old_text);
        test_write_text(f[2 * i + 1], "#define ONE 1\n");
    }
    struct stat st;
    REQUIRE(stat(f[0], &st) == 0);
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    REQUIRE(utimensat(AT_FDCWD, f[2], ts, 0) == 0);
    test_write_text(t.src, "#include <val.h>\n#include <sub/one.h>\n"
                           "extern \"C\" __global__ void k(int *o) { *o = VAL; o[1] = ONE; }\n");
    snprintf(link_path, sizeof(link_path), "%s/link", t.root);
    snprintf(alink, sizeof(alink), "%s/alink", t.root);
    snprintf(tmp, sizeof(tmp), "%s/link.new", t.root);
    REQUIRE(symlink("real", link_path) == 0);
    REQUIRE(symlink(link_path, alink) == 0);
    REQUIRE(unlink(t.val) == 0);
    snprintf(t.inc[1], sizeof(t.inc[1]), "-I%s", alink);
    warm_unmoved("symlink_chain", &t, offsetof(kc_closwatch_counts, walks),
                 "directories walked from / on their own");
    REQUIRE(symlink("real2", tmp) == 0);
    REQUIRE(rename(tmp, link_path) == 0);
    CHECK(sees_change("symlink_chain", &t, 1));
}

/*
 * -I first (empty), -I second with val.h and sub/one.h: <sub/one.h> is
 * looked for in first/sub, a directory that is not there. A hit the memo
 * serves stats nothing (first's watch counts "sub": a directory made there
 * is an event), and a header shadowing one.h made in a new first/sub (link:
 * first/sub a link to a directory holding it) is still a miss.
 */
static void absent_dir_case(const char *what, int link)
{
    struct tree t;
    char one[800], shadow[800], shadow_one[900], sub[800];
    tree_init(&t, test_dir(), what);
    snprintf(one, sizeof(one), "%s/sub", t.second);
    test_sh("mkdir -p '%s'", one);
    snprintf(one, sizeof(one), "%s/sub/one.h", t.second);
    test_write_text(one, "#define ONE 1\n");
    test_write_text(t.src, "#include <val.h>\n#include <sub/one.h>\n"
                           "extern \"C\" __global__ void k(int *o) { *o = VAL; o[1] = ONE; }\n");
    warm(what, &t, 1);
    kc_closwatch_counts before = memo();
    compile_expect(&t, 1);
    CHECK(memo().hits > before.hits);
    if (memo().left != before.left)
        fprintf(stderr, "%s: a hit the memo served made %llu checks\n", what,
                (unsigned long long)(memo().left - before.left));
    CHECK(memo().left == before.left);
    snprintf(sub, sizeof(sub), "%s/sub", t.first);
    snprintf(shadow, sizeof(shadow), "%s/shadow", t.root);
    test_sh("mkdir -p '%s'", link ? shadow : sub);
    snprintf(shadow_one, sizeof(shadow_one), "%s/one.h", link ? shadow : sub);
    char text[64];
    snprintf(text, sizeof(text), "#define ONE %s\n", t.new_val);
    test_write_text(shadow_one, text);
    if (link)
        REQUIRE(symlink(shadow, sub) == 0);
    CHECK(sees_change(what, &t, 1));
}

static void case_absent_dir(void)
{
    absent_dir_case("absent_dir", 0);
}

static void case_absent_dir_link(void)
{
    absent_dir_case("absent_dir_link", 1);
}

/*
 * -I a/x, -I b, -I a/y, val.h in a/y: the closure's directories in the
 * order they were looked in go from a to b and back. Its watch opens each
 * directory once.
 */
static void case_dir_order(void)
{
    struct tree t;
    char inc[3][760];
    tree_init(&t, test_dir(), "dir_order");
    test_sh("mkdir -p '%s/a/x' '%s/a/y' '%s/b'", t.root, t.root, t.root);
    snprintf(t.val, sizeof(t.val), "%s/a/y/val.h", t.root);
    test_write_text(t.val, t.old_text);
    const char *names[3] = {"a/x", "b", "a/y"};
    for (int i = 0; i < 3; i++) {
        snprintf(inc[i], sizeof(inc[i]), "-I%s/%s", t.root, names[i]);
        t.opts[i] = inc[i];
    }
    warm_unmoved("dir_order", &t, offsetof(kc_closwatch_counts, reopened),
                 "directories opened again");
}

/*
 * The check that watches a closure takes what the watches' set-up found
 * (each probe stat()ed once its watch is in place) rather than stat() each
 * probe again: it makes fewer stat()s than the first check did (a
 * directory probe is still its own).
 */
static void case_answers(void)
{
    struct tree t;
    tree_init(&t, test_dir(), "answers");
    compile_expect(&t, 0);
    uint64_t stats[3];
    for (int i = 0; i < 2; i++) {
        stats[i] = kc_manifest_stat_count();
        compile_expect(&t, 1);
    }
    stats[2] = kc_manifest_stat_count();
    uint64_t first = stats[1] - stats[0], watching = stats[2] - stats[1];
    if (watching >= first)
        fprintf(stderr, "answers: the first check made %llu stat()s, the one that watches %llu\n",
                (unsigned long long)first, (unsigned long long)watching);
    CHECK(watching < first);
    edit_keeping_times(t.val, t.new_text);
    CHECK(sees_change("answers", &t, 1));
}

/*
 * The parent remembers the closure and forks; the child hits, edits the
 * header and asks for the key alone (a check of the closure, nothing
 * stored): it must be another. The parent, whose watches saw the edit only
 * if the child left the events of the instance they share alone, must miss.
 */
static void case_fork(void)
{
    struct tree t;
    tree_init(&t, test_dir(), "fork");
    warm("fork", &t, 1);
    kcache_result *r = compile(&t);
    kcache_key old_key = r->key;
    kcache_result_free(r);
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        r = compile(&t);
        int ok = r->status == 0 && r->hit;
        kcache_result_free(r);
        edit_keeping_times(t.val, t.new_text);
        r = compile_flags(&t, KCACHE_COMPILE_KEY_ONLY | KCACHE_COMPILE_KEY_REMEMBERED);
        ok = ok && r->status == 0 && memcmp(r->key.bytes, old_key.bytes, KCACHE_KEY_SIZE) != 0;
        if (!ok)
            fprintf(stderr, "fork: the child did not see its edit\n");
        kcache_result_free(r);
        _exit(ok ? 0 : 1);
    }
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(sees_change("fork (parent)", &t, 1));
}

/*
 * Kernels that share a closure share the memo (CuPy's hits are of many
 * kernels over a few closures, each hit once): a second kernel including
 * what the first does is served by the memo on its first hit, though its
 * closure was recorded at another time; and still sees an edit.
 */
static void case_shared(void)
{
    struct tree t;
    tree_init(&t, test_dir(), "shared");
    warm("shared", &t, 1);
    struct tree other = t;
    other.opts[0] = other.inc[0];
    other.opts[1] = other.inc[1];
    snprintf(other.src, sizeof(other.src), "%s/src/other.cu", t.root);
    test_write_text(other.src, "#include <val.h>\n"
                               "extern \"C\" __global__ void k2(int *o) { o[1] = VAL; }\n");
    kcache_result *r = compile(&other);
    CHECK(r->status == 0 && !r->hit);
    kcache_result_free(r);
    uint64_t before = memo_hits();
    r = compile(&other);
    CHECK(r->status == 0 && r->hit);
    kcache_result_free(r);
    if (memo_hits() == before)
        fprintf(stderr, "shared: the other kernel's first hit was not served by the memo\n");
    CHECK(memo_hits() > before);
    edit_keeping_times(t.val, t.new_text);
    CHECK(sees_change("shared", &other, 1));
}

/*
 * CuPy names each program <a new temporary directory>/kern.cu: the same
 * kernel in another directory has the same closure (its name's directory
 * is only ever stat()ed, never covered), so the memo a first directory's
 * hits made serves the first hit in a second; an edit is still seen.
 */
static void case_new_dir(void)
{
    struct tree t;
    tree_init(&t, test_dir(), "new_dir");
    warm("new_dir", &t, 1);
    struct tree other = t;
    other.opts[0] = other.inc[0];
    other.opts[1] = other.inc[1];
    snprintf(other.src, sizeof(other.src), "%s/elsewhere/kern.cu", t.root);
    test_sh("mkdir -p '%s/elsewhere' && cp '%s' '%s'", t.root, t.src, other.src);
    uint64_t before = memo_hits();
    kcache_result *r = compile(&other);
    CHECK(r->status == 0 && r->hit);
    kcache_result_free(r);
    if (memo_hits() == before)
        fprintf(stderr, "new_dir: the first hit in another directory was not served by the memo\n");
    CHECK(memo_hits() > before);
    edit_keeping_times(t.val, t.new_text);
    CHECK(sees_change("new_dir", &other, 1));
}

/*
 * A tree on a network mount, edited at the server as another host would:
 * inotify on this host hears nothing, so the directory must not be covered
 * and the edit (size kept, mtime moved) is seen by stat().
 */
static void case_netfs(const char *mnt, const char *server)
{
    struct tree t;
    char val[800];
    tree_init(&t, mnt, "netfs");
    warm("netfs", &t, 0);
    snprintf(val, sizeof(val), "%s/netfs/second/val.h", server);
    int fd = open(val, O_WRONLY);
    REQUIRE(fd >= 0);
    REQUIRE(pwrite(fd, t.new_text, strlen(t.new_text), 0) == (ssize_t)strlen(t.new_text));
    close(fd);
    struct timespec ts[2] = {{0, UTIME_OMIT}, {1000000000, 0}};
    REQUIRE(utimensat(AT_FDCWD, val, ts, 0) == 0);
    CHECK(sees_change("netfs", &t, 1));
}

/*
 * A process holds at most an eighth of the user's inotify watches
 * (closwatch.c, watch_budget()): under a limit too small for the closure,
 * nothing is watched and every hit is a full check, still a hit. In a child:
 * its instance is its own, made under the limit it sets.
 */
static void case_budget(void)
{
    struct tree t;
    tree_init(&t, test_dir(), "budget");
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        setenv("KCACHE_TEST_INOTIFY_LIMIT", "16", 1); /* a budget of 2 watches */
        int ok = 1;
        kcache_result *r = compile(&t);
        ok &= r->status == 0 && !r->hit;
        kcache_result_free(r);
        uint64_t before = memo_hits();
        for (int i = 0; i < 4; i++) {
            r = compile(&t);
            ok &= r->status == 0 && r->hit;
            kcache_result_free(r);
        }
        if (memo_hits() != before)
            fprintf(stderr, "budget: the memo served hits beyond the watch budget\n");
        _exit(ok && memo_hits() == before ? 0 : 1);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}


/*
 * A directory of the -I path mounted over (an sshfs or a bind mount, which a
 * user may make with fusermount) raises no inotify event, yet the path now
 * names another directory: the memo must not serve the old closure. In a
 * child with a mount namespace of its own (skipped where none can be had).
 */
static void case_mount_over(void)
{
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
            fprintf(stderr, "mount_over: skipped: no mount namespace (%s)\n", strerror(errno));
            _exit(0);
        }
        struct tree t;
        char other[700], val[800];
        tree_init(&t, test_dir(), "mount_over");
        warm("mount_over", &t, 1);
        snprintf(other, sizeof(other), "%s/other", t.root);
        snprintf(val, sizeof(val), "%s/val.h", other);
        REQUIRE(mkdir(other, 0700) == 0);
        test_write_text(val, t.new_text);
        REQUIRE(mount(other, t.second, NULL, MS_BIND, NULL) == 0);
        CHECK(sees_change("mount_over", &t, 1));
        umount2(t.second, MNT_DETACH);
        _exit(test_done());
    }
    n_trees++; /* the child's tree is not the one the next case makes */
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/*
 * A program that closes descriptors it did not open (closefrom(), a
 * daemon's loop over every fd) and opens a file that takes the number of
 * the memo's inotify instance: the memo must not go on believing that no
 * event means no change.
 */
static void case_fd_reused(void)
{
    struct tree t;
    tree_init(&t, test_dir(), "fd_reused");
    warm("fd_reused", &t, 1);
    DIR *d = opendir("/proc/self/fd");
    REQUIRE(d);
    int fds[16], n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 16) {
        char link[300], target[256];
        snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(link, target, sizeof(target) - 1);
        if (k > 0) {
            target[k] = '\0';
            if (strstr(target, "inotify"))
                fds[n++] = atoi(e->d_name);
        }
    }
    closedir(d);
    REQUIRE(n > 0);
    for (int i = 0; i < n; i++) {
        int f = open(t.src, O_RDONLY);
        REQUIRE(f >= 0);
        lseek(f, 0, SEEK_END);
        REQUIRE(dup2(f, fds[i]) == fds[i]); /* the instance closed, its number a file at EOF */
        close(f);
    }
    edit_keeping_times(t.val, t.new_text);
    CHECK(sees_change("fd_reused", &t, 1));
}

/*
 * A second closure of the directory: other.cu includes val.h and extra.h,
 * so its closure is not kern.cu's, yet shares second/val.h (CuPy's closures
 * share most of CCCL). Its watch takes what kern.cu's found of the names
 * both look up, without a syscall, only while the directory's generation
 * holds (closwatch.c, cover_probe_locked()).
 */
static void other_kernel(struct tree *b, const struct tree *t)
{
    char extra[800];
    *b = *t;
    b->opts[0] = b->inc[0];
    b->opts[1] = b->inc[1];
    snprintf(b->src, sizeof(b->src), "%s/src/other.cu", t->root);
    snprintf(extra, sizeof(extra), "%s/extra.h", t->second);
    test_write_text(extra, "#define EXTRA 1\n");
    test_write_text(b->src, "#include <val.h>\n#include <extra.h>\n"
                            "extern \"C\" __global__ void k2(int *o) { o[EXTRA] = VAL; }\n");
}

/* A value of val.h's size that neither the old nor the new text holds. */
static void mid_text(const struct tree *t, char *buf, size_t size)
{
    snprintf(buf, size, "#define VAL 6%s\n", t->new_val + 1);
}

/*
 * kern.cu's closure watched; then how (if any) changes val.h's entry or
 * bytes; then other.cu's closure watched (its second check) and remembered;
 * then the file val.h names now is edited through a link made in a
 * directory kcache knows nothing of (no event in second/), or (earlier) a
 * val.h made in first/: other.cu must see it. A watch that took a stale wd
 * for val.h or first/ (an inode the name no longer names), or did not list
 * the wd it took, would serve a stale hit.
 */
static void reuse_case_then(const char *what, void (*how)(const struct tree *t), int earlier)
{
    struct tree t, b;
    char other[700], alias[800];
    tree_init(&t, test_dir(), what);
    other_kernel(&b, &t); /* extra.h made now: an entry made in second/ later would be an event */
    warm(what, &t, 1);
    if (how)
        how(&t);
    uint64_t before = memo().reused;
    warm(what, &b, 1);
    if (!how && memo().reused == before)
        fprintf(stderr, "%s: the second closure's watch took nothing from the first's\n", what);
    CHECK(how || memo().reused > before);
    if (earlier) {
        snprintf(alias, sizeof(alias), "%s/val.h", b.first);
        test_write_text(alias, b.new_text);
    } else {
        snprintf(other, sizeof(other), "%s/%s-elsewhere", test_dir(), what);
        snprintf(alias, sizeof(alias), "%s/alias.h", other);
        REQUIRE(mkdir(other, 0700) == 0);
        REQUIRE(link(b.val, alias) == 0);
        edit_keeping_times(alias, b.new_text);
    }
    CHECK(sees_change(what, &b, 1));
}

static void reuse_case(const char *what, void (*how)(const struct tree *t))
{
    reuse_case_then(what, how, 0);
}

/* val.h edited in place (the same inode): its wd is the one to take, at its generation now. */
static void edit_in_place(const struct tree *t)
{
    char mid[32];
    mid_text(t, mid, sizeof(mid));
    edit_keeping_times(t->val, mid);
}

/*
 * val.h edited through a link in a directory kcache knows nothing of: no
 * event in second/, so the name's wd is taken as found, and must be listed.
 */
static void edit_elsewhere(const struct tree *t)
{
    char other[700], alias[800], mid[32];
    snprintf(other, sizeof(other), "%s/%s-before", test_dir(), strrchr(t->root, '/') + 1);
    snprintf(alias, sizeof(alias), "%s/alias.h", other);
    REQUIRE(mkdir(other, 0700) == 0);
    REQUIRE(link(t->val, alias) == 0);
    mid_text(t, mid, sizeof(mid));
    edit_keeping_times(alias, mid);
}

/* val.h renamed away in its directory, a new val.h written: the name, another inode. */
static void rename_away(const struct tree *t)
{
    char old[900], mid[32];
    snprintf(old, sizeof(old), "%s/val.old", t->second);
    mid_text(t, mid, sizeof(mid));
    REQUIRE(rename(t->val, old) == 0);
    test_write_text(t->val, mid);
}

/*
 * val.h's old inode kept alive under a name elsewhere, so that its watch
 * stays (a file removed for good ends its watch: IN_IGNORED).
 */
static void keep_old(const struct tree *t)
{
    char kept[900];
    snprintf(kept, sizeof(kept), "%s/%s-old.h", test_dir(), strrchr(t->root, '/') + 1);
    REQUIRE(link(t->val, kept) == 0);
}

/* A new file written elsewhere and renamed over val.h. */
static void replace(const struct tree *t)
{
    char tmp[900], mid[32];
    keep_old(t);
    snprintf(tmp, sizeof(tmp), "%s/%s-staging.h", test_dir(), strrchr(t->root, '/') + 1);
    mid_text(t, mid, sizeof(mid));
    test_write_text(tmp, mid);
    REQUIRE(rename(tmp, t->val) == 0);
}

/* val.h's entry re-pointed at a file that already has a name elsewhere (link, then rename). */
static void repoint(const struct tree *t)
{
    char src[900], tmp[900], mid[32];
    keep_old(t);
    snprintf(src, sizeof(src), "%s/%s-existing.h", test_dir(), strrchr(t->root, '/') + 1);
    snprintf(tmp, sizeof(tmp), "%s/val.h.tmp", t->second);
    mid_text(t, mid, sizeof(mid));
    test_write_text(src, mid);
    REQUIRE(link(src, tmp) == 0);
    REQUIRE(rename(tmp, t->val) == 0);
}

/*
 * The -I directory first/ (val.h absent there) moved aside and a new one
 * made in its place: a walk that took the old one from its parent's note
 * would watch a directory no longer on the path, and miss val.h made in
 * the new one, earlier on the path than second/val.h.
 */
static void replace_dir(const struct tree *t)
{
    char old[800];
    snprintf(old, sizeof(old), "%s.old", t->first);
    REQUIRE(rename(t->first, old) == 0);
    REQUIRE(mkdir(t->first, 0700) == 0);
}

static void case_reuse_kept(void)
{
    reuse_case("reuse_kept", NULL);
}

static void case_reuse_edited(void)
{
    reuse_case("reuse_edited", edit_in_place);
}

static void case_reuse_edited_elsewhere(void)
{
    reuse_case("reuse_edited_elsewhere", edit_elsewhere);
}

static void case_reuse_dir_replaced(void)
{
    reuse_case_then("reuse_dir_replaced", replace_dir, 1);
}

static void case_reuse_renamed(void)
{
    reuse_case("reuse_renamed", rename_away);
}

static void case_reuse_replaced(void)
{
    reuse_case("reuse_replaced", replace);
}

static void case_reuse_repointed(void)
{
    reuse_case("reuse_repointed", repoint);
}

/*
 * A process that watched one closure checks closures again and again (the
 * drop-in under CuPy): another closure is watched on its first check, so
 * its second is served by the memo; an edit after is still a miss.
 */
static void case_first_watch(void)
{
    struct tree t, b;
    tree_init(&t, test_dir(), "first_watch");
    other_kernel(&b, &t);
    warm("first_watch", &t, 1);
    compile_expect(&b, 0);
    kc_closwatch_counts before = memo();
    compile_expect(&b, 1);
    compile_expect(&b, 1);
    if (memo().hits == before.hits)
        fprintf(stderr, "first_watch: the other closure's second check was not served by the "
                        "memo\n");
    CHECK(memo().hits > before.hits);
    edit_keeping_times(b.val, b.new_text);
    CHECK(sees_change("first_watch", &b, 1));
}

/* kc_closwatch_realpaths() of one path: its answer, also when realpath() has none. */
static int same_real(const char *path)
{
    char *real = NULL, *want = realpath(path, NULL);
    char *const paths[1] = {(char *)path};
    REQUIRE(kc_closwatch_realpaths(&real, paths, 1) == 0);
    int same = want ? real && !strcmp(real, want) : !real;
    if (!same)
        fprintf(stderr, "realpaths: %s gave %s, realpath() %s\n", path, real ? real : "nothing",
                want ? want : "nothing");
    free(real);
    free(want);
    return same;
}

/*
 * A process that watches asks for its -I directories' real paths on every
 * request (whether each is the toolkit's): a hit takes them from the memo,
 * and a link on the way retargeted, a directory made where nothing was,
 * or one removed, gives realpath()'s answer again.
 */
static void case_realpaths(void)
{
    struct tree t;
    char link_path[700], tmp[700], dir[2][700], under[800];
    tree_init(&t, test_dir(), "realpaths");
    for (int i = 0; i < 2; i++) {
        snprintf(dir[i], sizeof(dir[i]), "%s/r%d", t.root, i);
        REQUIRE(mkdir(dir[i], 0700) == 0);
    }
    snprintf(link_path, sizeof(link_path), "%s/rl", t.root);
    snprintf(tmp, sizeof(tmp), "%s/rl.new", t.root);
    snprintf(under, sizeof(under), "%s/rl/sub", t.root);
    REQUIRE(symlink("r0", link_path) == 0);
    snprintf(t.inc[0], sizeof(t.inc[0]), "-I%s", link_path);
    warm("realpaths", &t, 1);
    uint64_t before = memo().realpaths;
    compile_expect(&t, 1);
    if (memo().realpaths == before)
        fprintf(stderr, "realpaths: a hit took no -I directory's real path from the memo\n");
    CHECK(memo().realpaths > before);
    CHECK(same_real(link_path) && same_real(under));
    REQUIRE(symlink("r1", tmp) == 0);
    REQUIRE(rename(tmp, link_path) == 0);
    CHECK(same_real(link_path) && same_real(under));
    test_sh("mkdir '%s/r1/sub'", t.root);
    CHECK(same_real(under));
    REQUIRE(rmdir(under) == 0);
    CHECK(same_real(under));
    REQUIRE(rmdir(dir[1]) == 0);
    CHECK(same_real(link_path) && same_real(under));
}

/*
 * "val.h" is looked for beside the program's name first, a probe the memo
 * never covers (the name's directory changes from one request to the next):
 * a hit the memo serves still checks it, and a val.h made there is a miss.
 */
static void case_beside_name(void)
{
    struct tree t;
    char beside[800];
    tree_init(&t, test_dir(), "beside_name");
    test_write_text(t.src, "#include \"val.h\"\n"
                           "extern \"C\" __global__ void k(int *o) { *o = VAL; }\n");
    warm("beside_name", &t, 1);
    snprintf(beside, sizeof(beside), "%s/src/val.h", t.root);
    test_write_text(beside, t.new_text);
    CHECK(sees_change("beside_name", &t, 1));
}

int main(int argc, char **argv)
{
    kc_toolkit tk;
    char msg[512];
    if (kc_toolkit_find(&tk, NULL, msg, sizeof(msg)) != 0 ||
        kc_nvrtc_get(&tk, &api, msg, sizeof(msg)) != 0) {
        fprintf(stderr, "skipped: %s\n", msg);
        return TEST_SKIP;
    }
    setenv("KCACHE_TEST_CLOCK_SHIFT_NS", "10000000000", 1);
    char db[700];
    snprintf(db, sizeof(db), "%s/cache.db", test_dir());
    kcache_store_options so = KCACHE_STORE_OPTIONS_INIT;
    so.path = db;
    kcache_store *s = NULL;
    REQUIRE(kcache_store_open(&s, &so, msg, sizeof(msg)) == 0);
    comp = ct_compiler(s, NULL);
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"same_size_mtime", case_same_size_mtime},
        {"rename", case_rename},
        {"earlier", case_earlier_on_path},
        {"hard_link", case_hard_link},
        {"symlink_dir", case_symlink_dir},
        {"symlink_chain", case_symlink_chain},
        {"absent_dir", case_absent_dir},
        {"absent_dir_link", case_absent_dir_link},
        {"dir_order", case_dir_order},
        {"answers", case_answers},
        {"first_watch", case_first_watch},
        {"realpaths", case_realpaths},
        {"beside_name", case_beside_name},
        {"fork", case_fork},
        {"shared", case_shared},
        {"new_dir", case_new_dir},
        {"budget", case_budget},
        {"mount_over", case_mount_over},
        {"fd_reused", case_fd_reused},
        {"reuse_kept", case_reuse_kept},
        {"reuse_edited", case_reuse_edited},
        {"reuse_edited_elsewhere", case_reuse_edited_elsewhere},
        {"reuse_renamed", case_reuse_renamed},
        {"reuse_replaced", case_reuse_replaced},
        {"reuse_repointed", case_reuse_repointed},
        {"reuse_dir_replaced", case_reuse_dir_replaced},
    };
    if (argc == 4 && !strcmp(argv[1], "netfs")) {
        case_netfs(argv[2], argv[3]);
    } else {
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            int wanted = argc < 2;
            for (int a = 1; a < argc; a++)
                wanted |= !strcmp(argv[a], cases[i].name);
            if (wanted)
                cases[i].fn();
        }
    }
    kcache_compiler_free(comp);
    kcache_store_close(s);
    kc_toolkit_free(&tk);
    return test_done();
}
