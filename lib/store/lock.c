/*
 * Letting go of the store's lock, and the messages said under it: below every
 * other file of the store, which all unlock through here.
 */
#include <stdarg.h>

#include "store/storeint.h"

void kc_unlock(kcache_store *s)
{
    kc_logq said = kc_logq_take(&s->db.logq);
    pthread_mutex_unlock(&s->lock);
    kc_logq_deliver(&said, s->db.log, s->db.log_userdata);
}

void kc_log_unlocked(kcache_store *s, int level, const char *msg)
{
    if (!s->db.log)
        return;
    kc_logq one = {0};
    kc_logq_add(&one, level, msg);
    kc_logq_deliver(&one, s->db.log, s->db.log_userdata);
}

int kc_err_locking(kcache_store *s, int code, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&s->lock);
    va_start(ap, fmt);
    kc_db_verr(&s->db, code, fmt, ap);
    va_end(ap);
    kc_unlock(s);
    return code;
}
