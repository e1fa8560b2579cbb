/*
 * This file implements the addresses of an object-storage remote: the
 * remote URL (s3://BUCKET/PREFIX or http(s)://[user:password@]HOST/PATH)
 * and the s3_ settings made into the URL of each object, and the
 * credentials found where the AWS tools keep them: AWS_ACCESS_KEY_ID and
 * AWS_SECRET_ACCESS_KEY (with AWS_SESSION_TOKEN), else the profile
 * AWS_PROFILE names (default "default") in AWS_SHARED_CREDENTIALS_FILE or
 * ~/.aws/credentials. Secrets are never put in a message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/objaddr.h"

int kc_objaddr_is_url(const char *url)
{
    return !strncmp(url, "s3://", 5) || !strncmp(url, "http://", 7) ||
           !strncmp(url, "https://", 8);
}

/* Appends s percent-encoded (all but RFC 3986's unreserved, and '/' when keep_slash). */
static int append_encoded(char *out, size_t size, const char *s, int keep_slash)
{
    size_t n = strlen(out);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        int plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/');
        if (n + 4 >= size)
            return KCACHE_EINVAL;
        n += (size_t)snprintf(out + n, size - n, plain ? "%c" : "%%%02X", c);
    }
    return 0;
}

void kc_objaddr_key(char *out, size_t size, const kc_objaddr *a, const char *name)
{
    snprintf(out, size, "%s%s", a->key_prefix, name);
}

int kc_objaddr_url(char *out, size_t size, const kc_objaddr *a, const char *name)
{
    char key[KC_OBJ_URL_SIZE];
    kc_objaddr_key(key, sizeof(key), a, name);
    if ((size_t)snprintf(out, size, "%s/", a->base) >= size)
        return KCACHE_EINVAL;
    return append_encoded(out, size, key, 1);
}

/* Query parameters in the order SigV4 signs them (sorted), every value encoded. */
int kc_objaddr_list_url(char *out, size_t size, const kc_objaddr *a, const char *object_prefix,
                        const char *token)
{
    if ((size_t)snprintf(out, size, "%s/?", a->base) >= size)
        return KCACHE_EINVAL;
    int rc = 0;
    if (token && token[0]) {
        rc = (strlen(out) + 20 >= size) ? KCACHE_EINVAL : 0;
        if (!rc) {
            strcat(out, "continuation-token=");
            rc = append_encoded(out, size, token, 0);
        }
        if (!rc && strlen(out) + 2 < size)
            strcat(out, "&");
    }
    if (rc || strlen(out) + 40 >= size)
        return KCACHE_EINVAL;
    strcat(out, "list-type=2&max-keys=1000&prefix=");
    return append_encoded(out, size, object_prefix, 0);
}

void kc_objaddr_forget(kc_objaddr *a)
{
    memset(a->access_key, 0, sizeof(a->access_key));
    memset(a->secret_key, 0, sizeof(a->secret_key));
    memset(a->session_token, 0, sizeof(a->session_token));
    memset(a->password, 0, sizeof(a->password));
    memset(a->token, 0, sizeof(a->token));
}

static void copy(char *out, size_t size, const char *s, size_t n)
{
    snprintf(out, size, "%.*s", (int)KC_MIN(n, size - 1), s);
}

/* "key = value" of [profile] in an AWS credentials file, trimmed, into out. */
static void profile_value(char *out, size_t size, const char *text, const char *profile,
                          const char *key)
{
    int in_profile = 0;
    out[0] = '\0';
    for (const char *line = text; line && *line;) {
        const char *end = line + strcspn(line, "\r\n");
        while (line < end && (*line == ' ' || *line == '\t'))
            line++;
        if (*line == '[') {
            const char *close = memchr(line, ']', (size_t)(end - line));
            size_t n = close ? (size_t)(close - line - 1) : 0;
            in_profile = close && n == strlen(profile) && !strncmp(line + 1, profile, n);
        } else if (in_profile && !strncmp(line, key, strlen(key))) {
            const char *v = line + strlen(key);
            while (v < end && (*v == ' ' || *v == '\t'))
                v++;
            if (v < end && *v == '=') {
                v++;
                while (v < end && (*v == ' ' || *v == '\t'))
                    v++;
                const char *e = end;
                while (e > v && (e[-1] == ' ' || e[-1] == '\t'))
                    e--;
                copy(out, size, v, (size_t)(e - v));
                return;
            }
        }
        line = *end ? end + 1 : NULL;
    }
}

/* The credentials: the environment's, else the profile's; none (anonymous) when neither. */
static int credentials(kc_objaddr *a, char *msg, size_t msg_size)
{
    const char *key = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");
    if (key && key[0] && secret && secret[0]) {
        const char *session = getenv("AWS_SESSION_TOKEN");
        snprintf(a->access_key, sizeof(a->access_key), "%s", key);
        snprintf(a->secret_key, sizeof(a->secret_key), "%s", secret);
        snprintf(a->session_token, sizeof(a->session_token), "%s", session ? session : "");
        return 0;
    }
    const char *profile = getenv("AWS_PROFILE");
    const char *file = getenv("AWS_SHARED_CREDENTIALS_FILE");
    const char *home = getenv("HOME");
    char path[4096];
    if (file && file[0])
        snprintf(path, sizeof(path), "%s", file);
    else
        snprintf(path, sizeof(path), "%s/.aws/credentials", home ? home : "");
    char *text = NULL;
    size_t n = 0;
    if (kc_read_file(path, 1 << 20, &text, &n)) {
        if (profile && profile[0])
            return kc_fmt(msg, msg_size, KCACHE_EINVAL,
                          "AWS_PROFILE is %s but %s cannot be read: set "
                          "AWS_SHARED_CREDENTIALS_FILE or the AWS_ variables",
                          profile, path);
        return 0; /* anonymous: a public bucket */
    }
    const char *name = profile && profile[0] ? profile : "default";
    profile_value(a->access_key, sizeof(a->access_key), text, name, "aws_access_key_id");
    profile_value(a->secret_key, sizeof(a->secret_key), text, name, "aws_secret_access_key");
    profile_value(a->session_token, sizeof(a->session_token), text, name, "aws_session_token");
    memset(text, 0, n);
    free(text);
    if (!a->access_key[0] || !a->secret_key[0]) {
        kc_objaddr_forget(a);
        if (profile && profile[0])
            return kc_fmt(msg, msg_size, KCACHE_EINVAL,
                          "AWS_PROFILE %s has no aws_access_key_id and aws_secret_access_key "
                          "in %s",
                          profile, path);
    }
    return 0;
}

static int parse_s3(kc_objaddr *a, const char *url, const kc_objaddr_settings *s, char *msg,
                    size_t msg_size)
{
    const char *p = url + 5;
    size_t blen = strcspn(p, "/");
    /* S3's rule for bucket names, which also keeps them safe in a host name. */
    int ok = blen >= 3 && blen <= 63;
    for (size_t i = 0; ok && i < blen; i++)
        ok = (p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '-' ||
             p[i] == '.';
    if (!ok)
        return kc_fmt(msg, msg_size, KCACHE_EINVAL,
                      "remote '%s': expected s3://BUCKET/PREFIX, BUCKET 3 to 63 of a-z 0-9 . -",
                      url);
    char bucket[64], region[64] = "us-east-1", endpoint[512];
    copy(bucket, sizeof(bucket), p, blen);
    const char *prefix = p[blen] == '/' ? p + blen + 1 : "";
    snprintf(a->key_prefix, sizeof(a->key_prefix), "%s%s", prefix,
             prefix[0] && prefix[strlen(prefix) - 1] != '/' ? "/" : "");
    const char *env_region = getenv("AWS_REGION");
    if (!env_region || !env_region[0])
        env_region = getenv("AWS_DEFAULT_REGION");
    if (s->s3_region[0])
        snprintf(region, sizeof(region), "%s", s->s3_region);
    else if (env_region && env_region[0])
        snprintf(region, sizeof(region), "%.63s", env_region);
    if (strpbrk(region, ":/ "))
        return kc_fmt(msg, msg_size, KCACHE_EINVAL, "s3_region '%s' is not a region", region);
    if (s->s3_endpoint[0])
        snprintf(endpoint, sizeof(endpoint), "%s", s->s3_endpoint);
    else
        snprintf(endpoint, sizeof(endpoint), "https://s3.%s.amazonaws.com", region);
    /* The settings were checked as they were read (format/settings.c). */
    int virtual_host = s->s3_addressing[0] ? !strcmp(s->s3_addressing, "virtual")
                                           : !s->s3_endpoint[0];
    size_t slen = strstr(endpoint, "://") - endpoint + 3;
    if (virtual_host)
        snprintf(a->base, sizeof(a->base), "%.*s%s.%s", (int)slen, endpoint, bucket,
                 endpoint + slen);
    else
        snprintf(a->base, sizeof(a->base), "%s/%s", endpoint, bucket);
    snprintf(a->sigv4, sizeof(a->sigv4), "aws:amz:%s:s3", region);
    snprintf(a->shown, sizeof(a->shown), "%.240s (%.240s)", url, endpoint);
    int rc = credentials(a, msg, msg_size);
    a->authenticated = a->access_key[0] != '\0';
    return rc;
}

static int parse_http(kc_objaddr *a, const char *url, const kc_objaddr_settings *s, char *msg,
                      size_t msg_size)
{
    size_t slen = strstr(url, "://") - url + 3;
    const char *p = url + slen;
    size_t auth_len = strcspn(p, "/");
    const char *at = NULL;
    for (const char *q = p; q < p + auth_len; q++)
        if (*q == '@')
            at = q; /* the last one: a password may hold '@' */
    if (at) {
        const char *colon = memchr(p, ':', (size_t)(at - p));
        size_t ulen = colon ? (size_t)(colon - p) : (size_t)(at - p);
        size_t plen = colon ? (size_t)(at - colon - 1) : 0;
        if (ulen >= sizeof(a->user) || plen >= sizeof(a->password))
            return kc_fmt(msg, msg_size, KCACHE_EINVAL, "remote: the user or password is too long");
        copy(a->user, sizeof(a->user), p, ulen);
        copy(a->password, sizeof(a->password), colon ? colon + 1 : "", plen);
        p = at + 1;
    }
    size_t hlen = strcspn(p, "/?#");
    if (hlen == 0 || p[hlen] == '?' || p[hlen] == '#')
        return kc_fmt(msg, msg_size, KCACHE_EINVAL,
                      "remote: expected http(s)://[user:password@]host[:port]/path");
    const char *path = p + hlen;
    size_t path_len = strlen(path);
    while (path_len && path[path_len - 1] == '/')
        path_len--;
    if ((size_t)snprintf(a->base, sizeof(a->base), "%.*s%.*s%.*s", (int)slen, url, (int)hlen, p,
                         (int)path_len, path) >= sizeof(a->base))
        return kc_fmt(msg, msg_size, KCACHE_EINVAL, "remote: the URL is too long");
    snprintf(a->shown, sizeof(a->shown), "%.*s%.100s%s%.300s", (int)slen, url,
             a->user[0] ? a->user : "", a->user[0] ? ":***@" : "", a->base + slen);
    if (s->token[0] && strlen(s->token) < sizeof(a->token))
        snprintf(a->token, sizeof(a->token), "%s", s->token);
    a->authenticated = a->user[0] || a->token[0];
    return 0;
}

int kc_objaddr_parse(kc_objaddr *out, const char *url, const kc_objaddr_settings *s, char *msg,
                     size_t msg_size)
{
    memset(out, 0, sizeof(*out));
    out->s3 = !strncmp(url, "s3://", 5);
    if (s->ca[0] && (size_t)snprintf(out->ca, sizeof(out->ca), "%s", s->ca) >= sizeof(out->ca))
        return kc_fmt(msg, msg_size, KCACHE_EINVAL, "remote_ca: the path is too long");
    int rc = out->s3 ? parse_s3(out, url, s, msg, msg_size) : parse_http(out, url, s, msg,
                                                                         msg_size);
    if (rc)
        kc_objaddr_forget(out);
    return rc;
}
