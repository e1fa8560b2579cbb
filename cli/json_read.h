/*
 * A small JSON reader for the files users give the CLI (compile --from): the
 * whole document into a tree, strings decoded to UTF-8, errors with a line.
 * Not for large or hostile input beyond what a request list is: depth and
 * size are bounded.
 */
#ifndef KCACHE_CLI_JSON_READ_H
#define KCACHE_CLI_JSON_READ_H

#include <stddef.h>

typedef enum json_type {
    JSON_NULL,
    JSON_BOOL,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
} json_type;

typedef struct json_value json_value;
struct json_value {
    json_type type;
    int boolean;
    double number;
    char *string;       /* JSON_STRING: NUL-terminated UTF-8 */
    size_t n;           /* JSON_ARRAY, JSON_OBJECT: number of items */
    char **keys;        /* JSON_OBJECT: n keys */
    json_value **items; /* JSON_ARRAY, JSON_OBJECT: n values */
    int line;           /* where the value starts, for messages */
};

/*
 * Parses text (size bytes). Returns the tree, to free with json_free(), or
 * NULL with a message ("line 3: expected ':'") in err.
 */
json_value *json_parse(const char *text, size_t size, char *err, size_t err_size);
void json_free(json_value *v);

/* The member called key of an object, or NULL. */
const json_value *json_get(const json_value *object, const char *key);

/* "string", "array", ... for messages. */
const char *json_type_name(json_type type);

#endif
