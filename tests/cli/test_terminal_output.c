/*
 * What comes out of the cache is printed safely: an entry whose name,
 * toolchain, log, input name and name expressions hold OSC/CSI sequences, CR,
 * LF and 0xff is shown by ls, inspect (--log --source --ptx) and both --json
 * forms with no control byte and no forged line, the JSON valid UTF-8.
 *
 *   test_terminal_output            every case
 */

#include "casetest.h"

/* ---- what comes from the cache is printed safely ------------------------------------- */

static int valid_utf8(const unsigned char *p)
{
    while (*p) {
        int n = *p < 0x80             ? 0
                : (*p & 0xe0) == 0xc0 ? 1
                : (*p & 0xf0) == 0xe0 ? 2
                : (*p & 0xf8) == 0xf0 ? 3
                                      : -1;
        if (n < 0 || (n == 1 && *p < 0xc2))
            return 0;
        p++;
        for (int i = 0; i < n; i++, p++)
            if ((*p & 0xc0) != 0x80)
                return 0;
    }
    return 1;
}

/* No control byte but newline (and tab): no escape sequence, no forged line. */
static int terminal_safe(const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f)
            return 0;
    return 1;
}

static unsigned lines(const char *text)
{
    unsigned n = 0;
    for (; *text; text++)
        n += *text == '\n';
    return n;
}

static void case_control_bytes(int tc)
{
    if (!exe_or_skip(tc))
        return;
    const char *db = in_case(tc, "kcache.db");
    kcache_store *s = st_open(db, UINT64_MAX, NULL, NULL);
    static const char evil[] =
        "\033]0;pwned\007\033[2J\n0123456789abcdef  cubin  sm_90  fake\r\xff";
    char material[64], src[] = "x";
    kcache_input in[1] = {{KCACHE_INPUT_SOURCE, evil, src, 1}};
    const char *exprs[] = {evil}, *lowered[] = {evil};
    kcache_entry e = KCACHE_ENTRY_INIT;
    e.key = material_key(material, sizeof(material), 1);
    e.key_material = material;
    e.key_material_size = strlen(material);
    e.kind = KCACHE_KIND_PTX;
    e.arch = "sm_90";
    e.name = evil;
    e.toolchain = evil;
    e.log = evil;
    e.data = evil;
    e.size = sizeof(evil) - 1;
    e.n_inputs = 1;
    e.inputs = in;
    e.n_names = 1;
    e.name_exprs = exprs;
    e.lowered_names = lowered;
    REQUIRE(kcache_store_put(s, &e) == 0);
    kcache_store_close(s);
    char hex[KCACHE_KEY_HEX_SIZE];
    kcache_key_hex(hex, &e.key);
    struct cli_out o;
    run_kcache(&o, db, NULL, 20, ARGS("ls"));
    EXPECT(o.rc == 0 && terminal_safe(o.out) && lines(o.out) == 2, /* the header, the entry */
           "ls printed control bytes or extra lines (exit %d, %u lines)", o.rc, lines(o.out));
    run_kcache(&o, db, NULL, 20, ARGS("inspect", hex));
    EXPECT(o.rc == 0 && terminal_safe(o.out), "inspect printed control bytes (exit %d)", o.rc);
    run_kcache(&o, db, NULL, 20, ARGS("inspect", "--log", "--source", "--ptx", hex));
    EXPECT(o.rc == 0 && terminal_safe(o.out), "inspect --log --source --ptx printed control bytes");
    run_kcache(&o, db, NULL, 20, ARGS("ls", "--json"));
    EXPECT(o.rc == 0 && valid_utf8((const unsigned char *)o.out) && terminal_safe(o.out),
           "ls --json is not valid UTF-8 text");
    run_kcache(&o, db, NULL, 20, ARGS("inspect", "--json", hex));
    EXPECT(o.rc == 0 && valid_utf8((const unsigned char *)o.out) && terminal_safe(o.out),
           "inspect --json is not valid UTF-8 text (exit %d)", o.rc);
}

static const struct test_case cases[] = {
    {"control-bytes", case_control_bytes},
};

int main(int argc, char **argv)
{
    return run_cases(argc, argv, cases, KC_ARRAY_SIZE(cases), "terminal-output");
}
