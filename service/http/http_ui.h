/*
 * http_ui.h - the dashboard's files as the binary carries them.
 *
 * ui/ (index.html, CSS, JS modules) is turned into a C array at build time
 * by ui/embed.cmake, the way migrations/ are: one binary, nothing else to
 * deploy. http_ui.c serves them at /ui/ (the HTTP side is declared in
 * http_handlers.h); this header is what the generated file and the tests
 * see.
 */
#ifndef RMQS_HTTP_UI_H
#define RMQS_HTTP_UI_H

#include <stddef.h>

typedef struct http_ui_asset {
    const char *path;          /* "/ui/app.js" */
    const unsigned char *data; /* len bytes (static) */
    size_t len;
    const char *etag; /* quoted: "\"0123456789abcdef\"" */
} http_ui_asset;

/* The generated table (ui_embedded.c in the build tree), sorted by path. */
extern const http_ui_asset http_ui_assets[];
extern const size_t http_ui_assets_count;

/* The asset at path ("/ui/" is "/ui/index.html"), or NULL. */
const http_ui_asset *http_ui_find(const char *path);

/* The Content-Type of a path, by its extension (a static string);
 * application/octet-stream for one not known. */
const char *http_ui_content_type(const char *path);

#endif
