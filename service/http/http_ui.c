/*
 * http_ui.c - the dashboard at /ui/: its embedded files, its configuration
 * (/ui/config.json), its security headers, and the read-only mode's
 * refusal of changes made from a browser.
 *
 * Why a room of its own: the dashboard is a second kind of client with
 * rules of its own (a page, not an API): files served from the binary
 * (ui/embed.cmake puts them there) with an ETag and "Cache-Control:
 * no-cache" (a browser revalidates and gets 304 while the binary is the
 * same), a strict Content-Security-Policy and its companions on every
 * answer under /ui/, and --ui off|read-only|on.
 *
 * The files are public (they hold no data; the page asks for the token
 * and sends it as a bearer header on each API call); /ui/config.json
 * tells the page the mode, the version and whether a token is needed, and
 * only to an authorized caller the store, the broker URLs without their
 * passwords and the settings that matter. Never a token or a password.
 *
 * Read-only: every request that changes something (any method but GET,
 * HEAD and OPTIONS) and comes from a browser (it carries Origin or
 * Sec-Fetch-Site, which browsers add and scripts cannot remove) is
 * answered 403 ui_read_only; API clients without those headers are
 * unaffected. In every mode a change sent by a page of another origin
 * (Sec-Fetch-Site other than same-origin or none) is answered 403
 * cross_origin: no other site can drive this API from a browser. (Before
 * this, http_api.c has refused other Hosts, other Origins and form content
 * types: http_origin.h.)
 */
#include "http_ui.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http_handlers.h"
#include "log.h"
#include "store.h"

#define MOD "http"

#define UI_PREFIX "/ui/"
#define UI_CONFIG "/ui/config.json"

/* On every answer under /ui/ (and the redirects to it). */
#define CSP                                                       \
    "default-src 'none'; script-src 'self'; style-src 'self'; "   \
    "img-src 'self' data:; connect-src 'self'; font-src 'self'; " \
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
#define SECURITY_HEADERS                                                 \
    "Content-Security-Policy", CSP, "X-Content-Type-Options", "nosniff", \
        "Referrer-Policy", "no-referrer", "X-Frame-Options", "DENY",     \
        "Cross-Origin-Opener-Policy", "same-origin",                     \
        "Cross-Origin-Resource-Policy", "same-origin"

static const struct {
    const char *ext, *type;
} content_types[] = {
    {".html", "text/html; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".json", "application/json"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".txt", "text/plain; charset=utf-8"},
};

const char *http_ui_content_type(const char *path)
{
    const char *dot = strrchr(path, '.');

    for (size_t i = 0;
         dot && i < sizeof(content_types) / sizeof(content_types[0]); i++)
        if (strcmp(dot, content_types[i].ext) == 0)
            return content_types[i].type;
    return "application/octet-stream";
}

const http_ui_asset *http_ui_find(const char *path)
{
    if (strcmp(path, UI_PREFIX) == 0)
        path = UI_PREFIX "index.html";
    for (size_t i = 0; i < http_ui_assets_count; i++)
        if (strcmp(http_ui_assets[i].path, path) == 0)
            return &http_ui_assets[i];
    return NULL;
}

static bool ui_enabled(const http_api_t *api)
{
    return api->opt.ui == UI_MODE_ON || api->opt.ui == UI_MODE_READ_ONLY;
}

static const char *mode_name(ui_mode m)
{
    return m == UI_MODE_ON          ? "on"
           : m == UI_MODE_READ_ONLY ? "read-only"
                                    : "off";
}

/* Whether the request is a browser opening a page: it navigates
 * (Sec-Fetch-Mode: navigate, which browsers send and scripts cannot set),
 * or its Accept names text/html before any application/json (a browser's
 * Accept starts with text/html; an API client's names application/json,
 * curl's only the wildcard: neither is a page). */
static bool wants_page(struct MHD_Connection *c)
{
    const char *accept =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    const char *mode =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-Fetch-Mode");
    const char *html, *json;

    if (mode != NULL && strcasecmp(mode, "navigate") == 0)
        return true;
    if (accept == NULL || (html = strcasestr(accept, "text/html")) == NULL)
        return false;
    json = strcasestr(accept, "application/json");
    return json == NULL || html < json;
}

bool http_ui_public(const http_api_t *api, const char *url)
{
    return ui_enabled(api) &&
           (strcmp(url, "/ui") == 0 || strncmp(url, UI_PREFIX, 4) == 0);
}

bool http_ui_handles(const http_api_t *api, struct MHD_Connection *c,
                     const char *url)
{
    if (!ui_enabled(api))
        return false;
    if (strcmp(url, "/") == 0) /* API clients keep their 404 (or 401) */
        return wants_page(c);
    return http_ui_public(api, url);
}

/* Queue text (malloc'd, taken over) with the security headers and up to
 * two more pairs (NULL names: none). */
static enum MHD_Result ui_reply(struct MHD_Connection *c, unsigned status,
                                const char *type, char *text, size_t len,
                                const char *h1, const char *v1, const char *h2,
                                const char *v2)
{
    /* A NULL h1 (or h2) ends the list there. */
    const char *hdrs[] = {SECURITY_HEADERS, h1, v1, h2, v2, NULL};

    return http_reply_raw(c, status, type, text, len, hdrs);
}

static enum MHD_Result ui_error(struct MHD_Connection *c, unsigned status,
                                const char *code, const char *message,
                                const char *h1, const char *v1)
{
    json_t *j =
        json_pack("{s:{s:s,s:s}}", "error", "code", code, "message", message);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;

    json_decref(j);
    return ui_reply(c, status, "application/json", text,
                    text ? strlen(text) : 0, h1, v1, NULL, NULL);
}

static enum MHD_Result ui_redirect(struct MHD_Connection *c)
{
    char *text = strdup("");
    return ui_reply(c, MHD_HTTP_FOUND, "text/plain; charset=utf-8", text, 0,
                    MHD_HTTP_HEADER_LOCATION, UI_PREFIX, NULL, NULL);
}

/* The settings the About page shows: what explains the service's
 * behaviour, never a credential (no token, no password, no key file
 * contents). */
static json_t *settings_json(const config *cfg)
{
    json_t *ingest = json_array();
    json_t *s;

    for (size_t i = 0; ingest && i < cfg->ingest.n; i++)
        json_array_append_new(
            ingest, json_pack("{s:s,s:s}", "ingest",
                              cfg->ingest.maps[i].ingest_exchange, "target",
                              cfg->ingest.maps[i].target_exchange));
    s = json_pack(
        "{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I,"
        " s:s, s:I, s:I, s:b, s:o}",
        "listen", cfg->listen, "schedule_lead_ms",
        (json_int_t)cfg->schedule_lead_ms, "dispatch_lookahead_ms",
        (json_int_t)cfg->dispatch_lookahead_ms, "max_attempts",
        (json_int_t)cfg->max_attempts, "backoff_base_ms",
        (json_int_t)cfg->backoff_base_ms, "backoff_cap_ms",
        (json_int_t)cfg->backoff_cap_ms, "max_body_bytes",
        (json_int_t)cfg->max_body_bytes, "max_delay_days",
        (json_int_t)cfg->max_delay_days, "retention_s",
        (json_int_t)cfg->retention_s, "batch_size", (json_int_t)cfg->batch_size,
        "publish_window", (json_int_t)cfg->publish_window, "sync",
        cfg->sync_full ? "full" : "normal", "http_threads",
        (json_int_t)cfg->http_threads, "heartbeat_s",
        (json_int_t)cfg->heartbeat_s, "https", cfg->tls_cert_file != NULL,
        "ingest", ingest ? ingest : json_null());
    if (s != NULL)
        json_object_set_new(s, "allow_exchanges",
                            cfg->allow_exchanges
                                ? http_safe_string(cfg->allow_exchanges)
                                : json_null());
    return s;
}

/* The broker URLs (comma-separated, passwords already replaced) as an
 * array. */
static json_t *urls_json(const char *urls)
{
    json_t *a = json_array();

    for (const char *p = urls; a && p && *p;) {
        size_t n = strcspn(p, ",");
        char *one = strndup(p, n);
        if (one != NULL)
            json_array_append_new(a, http_safe_string(one));
        free(one);
        p += n + (p[n] == ',');
    }
    return a;
}

static enum MHD_Result ui_config(http_api_t *api, struct MHD_Connection *c)
{
    const config *cfg = api->opt.ui_settings;
    bool authorized = http_authorized(api, c);
    json_t *j = json_pack("{s:s, s:s, s:s, s:b, s:b}", "mode",
                          mode_name(api->opt.ui), "mode_chosen_by",
                          cfg != NULL && cfg->ui_auto ? "auto" : "setting",
                          "version", RMQS_VERSION, "token_required",
                          api->token != NULL, "authorized", authorized);
    char *text;

    if (j != NULL && authorized && cfg != NULL) {
        char target[512];
        store_safe_target(cfg->db_path, target, sizeof(target));
        json_object_set_new(
            j, "store",
            json_pack("{s:s, s:o}", "kind",
                      store_is_file(cfg->db_path) ? "sqlite" : "postgres",
                      "target", http_safe_string(target)));
        json_object_set_new(
            j, "broker",
            json_pack("{s:o}", "urls", urls_json(api->ui_broker_urls)));
        json_object_set_new(j, "settings", settings_json(cfg));
    }
    text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    /* It says who may do what: never cached. */
    return ui_reply(c, MHD_HTTP_OK, "application/json", text,
                    text ? strlen(text) : 0, MHD_HTTP_HEADER_CACHE_CONTROL,
                    "no-store", NULL, NULL);
}

enum MHD_Result http_ui_serve(http_api_t *api, struct MHD_Connection *c,
                              const char *url, const char *method)
{
    const http_ui_asset *a;
    const char *inm;
    char *text;

    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return ui_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed",
                        "method not allowed", MHD_HTTP_HEADER_ALLOW,
                        "GET, HEAD");
    if (strcmp(url, "/") == 0 || strcmp(url, "/ui") == 0)
        return ui_redirect(c);
    if (strcmp(url, UI_CONFIG) == 0)
        return ui_config(api, c);
    a = http_ui_find(url);
    if (a == NULL)
        return ui_error(c, MHD_HTTP_NOT_FOUND, "not_found", "no such page",
                        NULL, NULL);
    inm = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                      MHD_HTTP_HEADER_IF_NONE_MATCH);
    if (inm != NULL && strstr(inm, a->etag) != NULL)
        return ui_reply(c, MHD_HTTP_NOT_MODIFIED, http_ui_content_type(a->path),
                        strdup(""), 0, MHD_HTTP_HEADER_ETAG, a->etag,
                        MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    text = malloc(a->len + 1);
    if (text != NULL)
        memcpy(text, a->data, a->len);
    return ui_reply(c, MHD_HTTP_OK, http_ui_content_type(a->path), text, a->len,
                    MHD_HTTP_HEADER_ETAG, a->etag,
                    MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
}

bool http_ui_refused(http_api_t *api, struct MHD_Connection *c,
                     const char *method, enum MHD_Result *ret)
{
    const char *site, *origin;

    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0 ||
        strcmp(method, "OPTIONS") == 0)
        return false;
    site = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-Fetch-Site");
    origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (site != NULL && strcasecmp(site, "same-origin") != 0 &&
        strcasecmp(site, "none") != 0) {
        log_warn(MOD, "change from another site refused",
                 "method=%s sec_fetch_site=%.32s", method, site);
        *ret = http_reply_error(c, MHD_HTTP_FORBIDDEN, "cross_origin", NULL,
                                "changes from pages of another origin are "
                                "refused");
        return true;
    }
    if (api->opt.ui != UI_MODE_READ_ONLY || (site == NULL && origin == NULL))
        return false;
    log_info(MOD, "change from a browser refused (read-only dashboard)",
             "method=%s", method);
    *ret = http_reply_error(c, MHD_HTTP_FORBIDDEN, "ui_read_only", NULL,
                            "the dashboard is read-only (--ui read-only): "
                            "changes sent by a browser are refused");
    return true;
}
