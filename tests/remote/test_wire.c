/*
 * The shared tier's value format (remote/wire.h) and URL parsing, without a
 * server: what is pushed decodes to what was put; anything changed, unsigned
 * under a secret, or claiming more than the bounds is refused, and the
 * bounds are checked before anything is decompressed.
 */
#include <string.h>

#include <stdlib.h>

#include <kcache/remote.h>

#include "remote/backend.h"
#include "remote/objaddr.h"
#include "remote/wire.h"
#include "storetest.h"
#include "testutil.h"

static const char *const exprs[] = {"k<float>", "k<int>"};
static const char *const lowered[] = {"_Z1kIfEvv", "_Z1kIiEvv"};

static void make_entry(kcache_entry *e, const uint8_t *material, size_t material_size,
                       const void *data, size_t size)
{
    kcache_entry init = KCACHE_ENTRY_INIT;
    *e = init;
    kc_digest(e->key.bytes, material, material_size);
    e->kind = KCACHE_KIND_CUBIN;
    e->arch = "sm_90";
    e->name = "k.cu";
    e->data = data;
    e->size = size;
    e->log = "a warning";
    e->toolchain = "nvrtc 13.0";
    e->compile_ns = 123456789;
    e->key_material = material;
    e->key_material_size = material_size;
    e->n_names = 2;
    e->name_exprs = exprs;
    e->lowered_names = lowered;
}

static int decodes(kc_codec_ctx *c, const kcache_key *key, const kc_buf *v,
                   const kc_wire_secret *s, char *why, size_t why_size)
{
    kc_wire_entry w;
    int rc = kc_wire_decode(&w, c, key, v->data, v->size, s, why, why_size);
    if (rc == 0)
        kc_wire_entry_free(&w);
    return rc;
}

static void test_round_trip(kc_codec_ctx *c)
{
    static uint8_t data[8192];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i % 61 < 40 ? i % 7 : i * 13);
    const uint8_t material[] = "\x01\x0c\x00\x00\x00kcache-key-1 and more";
    kcache_entry e;
    make_entry(&e, material, sizeof(material), data, sizeof(data));
    kc_wire_secret none, secret, other;
    kc_wire_secret_init(&none, NULL);
    kc_wire_secret_init(&secret, "fleet");
    kc_wire_secret_init(&other, "not the fleet's");
    kc_buf v = {0};
    CHECK_RC(kc_wire_encode(&v, c, KC_WIRE_PUSH_CODEC, &e, 42, &none), 0);
    kc_wire_entry w;
    char why[256];
    CHECK_RC(kc_wire_decode(&w, c, &e.key, v.data, v.size, &none, why, sizeof(why)), 0);
    CHECK(w.e.size == sizeof(data) && memcmp(w.e.data, data, sizeof(data)) == 0);
    CHECK(!strcmp(w.e.arch, "sm_90") && !strcmp(w.e.name, "k.cu") &&
          !strcmp(w.e.log, "a warning") && !strcmp(w.e.toolchain, "nvrtc 13.0"));
    CHECK(w.e.n_names == 2 && !strcmp(w.e.name_exprs[1], "k<int>") &&
          !strcmp(w.e.lowered_names[0], "_Z1kIfEvv"));
    CHECK(w.e.compile_ns == 123456789 && w.e.created_at == 42 && w.e.kind == KCACHE_KIND_CUBIN);
    CHECK(w.e.key_material_size == sizeof(material));
    kc_wire_entry_free(&w);

    /* Any single byte changed is refused. */
    size_t refused = 0;
    for (size_t i = 0; i < v.size; i++) {
        v.data[i] ^= 0x20;
        if (decodes(c, &e.key, &v, &none, why, sizeof(why)) == KCACHE_ECORRUPT)
            refused++;
        else
            fprintf(stderr, "byte %zu changed was not noticed\n", i);
        v.data[i] ^= 0x20;
    }
    CHECK(refused == v.size);

    /* Under another key: the checksum (and a signature) cover the key. */
    kcache_key wrong = e.key;
    wrong.bytes[0] ^= 1;
    CHECK_RC(decodes(c, &wrong, &v, &none, why, sizeof(why)), KCACHE_ECORRUPT);
    /* Pushed under a key its material does not hash to (a forger's value). */
    kcache_entry forged = e;
    forged.key = wrong;
    kc_buf fv = {0};
    CHECK_RC(kc_wire_encode(&fv, c, KC_WIRE_PUSH_CODEC, &forged, 42, &none), 0);
    CHECK_RC(decodes(c, &wrong, &fv, &none, why, sizeof(why)), KCACHE_ECORRUPT);
    CHECK(strstr(why, "key material") != NULL);
    kc_buf_free(&fv);

    /* With a secret: unsigned refused, signed accepted, another secret refused. */
    CHECK_RC(decodes(c, &e.key, &v, &secret, why, sizeof(why)), KCACHE_ECORRUPT);
    CHECK(strstr(why, "not signed") != NULL);
    kc_buf sv = {0};
    CHECK_RC(kc_wire_encode(&sv, c, KC_WIRE_PUSH_CODEC, &e, 42, &secret), 0);
    CHECK_RC(decodes(c, &e.key, &sv, &secret, why, sizeof(why)), 0);
    CHECK_RC(decodes(c, &e.key, &sv, &none, why, sizeof(why)), 0); /* no secret: not checked */
    CHECK_RC(decodes(c, &e.key, &sv, &other, why, sizeof(why)), KCACHE_ECORRUPT);
    CHECK(strstr(why, "signature") != NULL);
    sv.data[sv.size - 1] ^= 1;
    CHECK_RC(decodes(c, &e.key, &sv, &secret, why, sizeof(why)), KCACHE_ECORRUPT);

    /* Bounds before decompressing: a header claiming 8 GiB is refused on its word. */
    uint64_t huge = UINT64_C(8) << 30;
    for (int i = 0; i < 8; i++)
        v.data[24 + i] = (uint8_t)(huge >> (8 * i));
    CHECK_RC(decodes(c, &e.key, &v, &none, why, sizeof(why)), KCACHE_ECORRUPT);
    CHECK(strstr(why, "over the bound") != NULL);
    CHECK_RC(decodes(c, &e.key, &v, &none, why, 0) , KCACHE_ECORRUPT);
    /* Truncated anywhere. */
    for (size_t n = 0; n < sv.size; n += 7) {
        kc_buf t = {sv.data, n, n};
        CHECK_RC(decodes(c, &e.key, &t, &secret, why, sizeof(why)), KCACHE_ECORRUPT);
    }
    kc_buf_free(&v);
    kc_buf_free(&sv);
}

/*
 * Values in every codec read back, whichever codec the reader's store writes
 * (a later build may push lz4); what this build pushes is zstd; a codec
 * number nobody knows is refused before anything is decoded.
 */
static void test_codecs(kc_codec_ctx *c)
{
    static uint8_t data[20000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (uint8_t)(i % 61 < 40 ? i % 7 : i * 13);
    const uint8_t material[] = "kcache-key-codecs";
    kcache_entry e;
    make_entry(&e, material, sizeof(material), data, sizeof(data));
    kc_wire_secret none;
    kc_wire_secret_init(&none, NULL);
    static const int methods[] = {KC_CODEC_ZSTD, KC_CODEC_LZ4, KC_CODEC_RAW};
    char why[256];
    for (size_t m = 0; m < sizeof(methods) / sizeof(methods[0]); m++) {
        kc_buf v = {0};
        CHECK_RC(kc_wire_encode(&v, c, methods[m], &e, 7, &none), 0);
        CHECK(kc_read_u32(v.data + 16) == (uint32_t)methods[m]);
        kc_codec_ctx *reader = NULL;
        REQUIRE(kc_codec_new(&reader) == 0);
        kc_wire_entry w;
        CHECK_RC(kc_wire_decode(&w, reader, &e.key, v.data, v.size, &none, why, sizeof(why)), 0);
        CHECK(w.e.size == sizeof(data) && memcmp(w.e.data, data, sizeof(data)) == 0);
        kc_wire_entry_free(&w);
        kc_codec_free(reader);
        if (methods[m] == KC_CODEC_LZ4) {
            v.data[16] = 9;
            CHECK_RC(decodes(c, &e.key, &v, &none, why, sizeof(why)), KCACHE_ECORRUPT);
            CHECK(strstr(why, "codec") != NULL);
        }
        kc_buf_free(&v);
    }
    CHECK(KC_WIRE_PUSH_CODEC == KC_CODEC_ZSTD);
}

static void test_endpoint(void)
{
    kc_endpoint ep;
    char msg[256];
    CHECK_RC(kc_endpoint_parse(&ep, "redis://127.0.0.1:6380", msg, sizeof(msg)), 0);
    CHECK(!strcmp(ep.host, "127.0.0.1") && ep.port == 6380 && ep.db == 0 && !ep.password[0]);
    CHECK_RC(kc_endpoint_parse(&ep, "redis://ci:p@ss:w@cache.internal/3", msg, sizeof(msg)), 0);
    CHECK(!strcmp(ep.user, "ci") && !strcmp(ep.password, "p@ss:w") &&
          !strcmp(ep.host, "cache.internal") && ep.port == 6379 && ep.db == 3);
    CHECK_RC(kc_endpoint_parse(&ep, "redis://:pw@h:1/", msg, sizeof(msg)), 0);
    CHECK(!ep.user[0] && !strcmp(ep.password, "pw") && ep.port == 1);
    const char *bad[] = {"http://h:1", "redis://", "redis://h:0", "redis://h:65536",
                         "redis://h:12x", "redis://h/x", "redis://u:@h", "redis://h:1/2/3"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CHECK_RC(kc_endpoint_parse(&ep, bad[i], msg, sizeof(msg)), KCACHE_EINVAL);
        CHECK(msg[0] != '\0');
    }
}

/* No remote set is its own answer, never a success with nothing in it. */
static void test_open_without_remote(void)
{
    unsetenv("KCACHE_REMOTE");
    kcache_store *s = st_open(test_path("none.db"), 0, NULL, NULL);
    kcache_remote *r = (kcache_remote *)&r; /* must be overwritten */
    char msg[512] = "";
    CHECK_RC(kcache_remote_open(&r, s, NULL, msg, sizeof(msg)), KCACHE_ENOTFOUND);
    CHECK(r == NULL && strstr(msg, "no remote set"));
    r = (kcache_remote *)&r;
    CHECK_RC(kcache_remote_open(&r, s, "ftp://h:1", msg, sizeof(msg)), KCACHE_EINVAL);
    CHECK(r == NULL && msg[0] != '\0');
    r = (kcache_remote *)&r;
    CHECK_RC(kcache_remote_open(&r, s, "s3://x", msg, sizeof(msg)), KCACHE_EINVAL);
    CHECK(r == NULL && strstr(msg, "BUCKET 3 to 63"));
    /* An object store: opened (nothing is connected until a request), no secret shown. */
    CHECK_RC(kcache_remote_open(&r, s, "http://u:pw@127.0.0.1:1/c", msg, sizeof(msg)), 0);
    CHECK(r != NULL && !strcmp(kcache_remote_url(r), "http://u:***@127.0.0.1:1/c"));
    kcache_remote_close(r);
    CHECK_RC(kcache_remote_open(&r, s, "redis://127.0.0.1:1", msg, sizeof(msg)), 0);
    CHECK(r != NULL);
    kcache_remote_close(r);
    kcache_store_close(s);
}

/* A caller's struct of an unknown version: refused with the message every function gives. */
static void test_unknown_versions(void)
{
    kcache_store *s = st_open(test_path("versions.db"), 0, NULL, NULL);
    kcache_remote *r = NULL;
    char msg[512] = "";
    REQUIRE(kcache_remote_open(&r, s, "redis://127.0.0.1:1", msg, sizeof(msg)) == 0 && r);
    kcache_remote_info info = KCACHE_REMOTE_INFO_INIT;
    info.version = 99;
    CHECK_RC(kcache_remote_check(&info, r), KCACHE_EINVAL);
    CHECK(strstr(kcache_remote_errmsg(r), "kcache_remote_info version 99 is not one"));
    kcache_transfer t = KCACHE_TRANSFER_INIT;
    t.version = 0;
    CHECK_RC(kcache_remote_pull(&t, r, NULL, NULL, NULL), KCACHE_EINVAL);
    CHECK(strstr(kcache_remote_errmsg(r), "kcache_transfer version 0 is not one"));
    kcache_remote_close(r);
    kcache_store_close(s);
}

/* Object stores: each object's URL, path-style and virtual-host, and where credentials come from. */
static void test_objaddr(void)
{
    kc_objaddr a;
    char msg[512], url[KC_OBJ_URL_SIZE];
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_REGION");
    unsetenv("AWS_DEFAULT_REGION");
    const char *creds = test_path("credentials");
    test_write_text(creds, "[default]\naws_access_key_id=D\naws_secret_access_key=DS\n"
                           "[ci]\n aws_access_key_id = AK \naws_secret_access_key=SK\n"
                           "aws_session_token = T\n");
    setenv("AWS_SHARED_CREDENTIALS_FILE", creds, 1);
    setenv("AWS_PROFILE", "ci", 1);
    kc_objaddr_settings path = {"http://127.0.0.1:9000", "", "", "", ""};
    CHECK_RC(kc_objaddr_parse(&a, "s3://bkt/team", &path, msg, sizeof(msg)), 0);
    CHECK(kc_objaddr_url(url, sizeof(url), &a, "kcache:entry:ab") == 0);
    CHECK(!strcmp(url, "http://127.0.0.1:9000/bkt/team/kcache%3Aentry%3Aab"));
    CHECK(!strcmp(a.access_key, "AK") && !strcmp(a.secret_key, "SK") &&
          !strcmp(a.session_token, "T") && !strcmp(a.sigv4, "aws:amz:us-east-1:s3"));
    CHECK(!strstr(a.shown, "SK") && a.authenticated);
    CHECK(kc_objaddr_list_url(url, sizeof(url), &a, "team/kcache:entry:", "a/b=") == 0);
    CHECK(!strcmp(url, "http://127.0.0.1:9000/bkt/?continuation-token=a%2Fb%3D&list-type=2&"
                       "max-keys=1000&prefix=team%2Fkcache%3Aentry%3A"));
    kc_objaddr_settings aws = {"", "eu-west-1", "", "", ""};
    unsetenv("AWS_PROFILE");
    CHECK_RC(kc_objaddr_parse(&a, "s3://bkt", &aws, msg, sizeof(msg)), 0);
    CHECK(kc_objaddr_url(url, sizeof(url), &a, "x") == 0);
    CHECK(!strcmp(url, "https://bkt.s3.eu-west-1.amazonaws.com/x"));
    CHECK(!strcmp(a.access_key, "D") && !strcmp(a.sigv4, "aws:amz:eu-west-1:s3"));
    setenv("AWS_PROFILE", "absent", 1);
    CHECK_RC(kc_objaddr_parse(&a, "s3://bkt", &aws, msg, sizeof(msg)), KCACHE_EINVAL);
    CHECK(strstr(msg, "AWS_PROFILE absent") && !a.secret_key[0]);
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    kc_objaddr_settings none = {"", "", "", "tok", ""};
    CHECK_RC(kc_objaddr_parse(&a, "https://u:p@w@h:8/c/", &none, msg, sizeof(msg)), 0);
    CHECK(!strcmp(a.base, "https://h:8/c") && !strcmp(a.user, "u") && !strcmp(a.password, "p@w"));
    CHECK(!strcmp(a.shown, "https://u:***@h:8/c") && !strcmp(a.token, "tok"));
    CHECK(kc_objaddr_url(url, sizeof(url), &a, "kcache:entry:ab") == 0);
    CHECK(!strcmp(url, "https://h:8/c/kcache%3Aentry%3Aab"));
    kc_objaddr_forget(&a);
}

int main(void)
{
    kc_codec_ctx *c = NULL;
    REQUIRE(kc_codec_new(&c) == 0 && c);
    test_round_trip(c);
    test_codecs(c);
    test_endpoint();
    test_objaddr();
    test_open_without_remote();
    test_unknown_versions();
    kc_codec_free(c);
    return test_done();
}
