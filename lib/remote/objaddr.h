/*
 * Where an object-storage remote is and who we are to it (objaddr.c): the
 * remote URL and the s3_ settings read into addresses, and the credentials
 * from where the AWS tools keep them. objstore.c does the requests.
 */
#ifndef KC_OBJADDR_H
#define KC_OBJADDR_H

#include "remote/backend.h"

#define KC_OBJ_URL_SIZE 2048

typedef struct kc_objaddr {
    int s3;                /* s3://; else plain http(s):// */
    char base[1024];       /* what an object's key is appended to (after '/'), no userinfo */
    char key_prefix[512];  /* put before every name: s3://BUCKET/PREFIX's PREFIX/ */
    char shown[500];       /* the remote, no secret: for messages and kcache remote check */
    char sigv4[160];       /* "aws:amz:REGION:s3" */
    char access_key[256], secret_key[256], session_token[2048];
    char user[128], password[256], token[1024]; /* http: basic (from the URL) or bearer */
    char ca[1024];         /* remote_ca: the CA certificates (PEM) to verify against; "" the system's */
    int authenticated;     /* credentials are sent */
    unsigned connect_ms, timeout_ms;
} kc_objaddr;

/* The settings an object-storage remote reads beside remote (each "" when unset). */
typedef struct kc_objaddr_settings {
    const char *s3_endpoint, *s3_region, *s3_addressing, *token, *ca;
} kc_objaddr_settings;

/* Whether url names an object-storage remote (s3://, http://, https://). */
int kc_objaddr_is_url(const char *url);
/* Parses url with the settings and finds the credentials. 0, or KCACHE_EINVAL (msg says why). */
int kc_objaddr_parse(kc_objaddr *out, const char *url, const kc_objaddr_settings *s, char *msg,
                     size_t msg_size);
/* The object key of name: key_prefix + name. */
void kc_objaddr_key(char *out, size_t size, const kc_objaddr *a, const char *name);
/* The URL of name's object; KCACHE_EINVAL when it does not fit. */
int kc_objaddr_url(char *out, size_t size, const kc_objaddr *a, const char *name);
/* The URL of a page of the listing of keys under object_prefix (S3's ListObjectsV2). */
int kc_objaddr_list_url(char *out, size_t size, const kc_objaddr *a, const char *object_prefix,
                        const char *token);
/* Wipes the credentials. */
void kc_objaddr_forget(kc_objaddr *a);

/* An object-storage backend (objstore.c); nothing is connected until the first call. */
int kc_objstore_new(kc_backend **out, const kc_objaddr *addr, char *msg, size_t msg_size);

#endif
