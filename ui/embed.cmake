# Turns the dashboard's files (ui/, the folder is DIR; this script and
# dotfiles left out) into a C array of http_ui_asset named http_ui_assets,
# with http_ui_assets_count beside it, so the binary serves them without
# any file on disk. Each asset carries its bytes and an ETag (the first 16
# hex digits of its SHA-256). Run by the build (see CMakeLists.txt); the
# output lives in the build tree only.
file(GLOB_RECURSE files RELATIVE ${DIR} ${DIR}/*)
list(SORT files)
set(body "/* Generated from ui/ by ui/embed.cmake. */\n#include \"http_ui.h\"\n\n")
set(table "const http_ui_asset http_ui_assets[] = {\n")
set(count 0)
foreach(f ${files})
  if(f MATCHES "(^|/)\\." OR f STREQUAL "embed.cmake")
    continue()
  endif()
  if(NOT f MATCHES "^[A-Za-z0-9_./-]+$")
    message(FATAL_ERROR "ui/${f}: names are letters, digits, '_', '-', '.' and '/'")
  endif()
  file(READ ${DIR}/${f} hex HEX)
  file(SHA256 ${DIR}/${f} sum)
  string(SUBSTRING ${sum} 0 16 etag)
  string(LENGTH "${hex}" hexlen)
  math(EXPR len "${hexlen} / 2")
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "((0x..,){24})" "\\1\n  " bytes "${bytes}")
  string(APPEND body "static const unsigned char asset_${count}[] = {\n  ${bytes}0};\n")
  string(APPEND table "  {\"/ui/${f}\", asset_${count}, ${len}, \"\\\"${etag}\\\"\"},\n")
  math(EXPR count "${count} + 1")
endforeach()
string(APPEND body "\n${table}};\nconst size_t http_ui_assets_count = ${count};\n")
file(WRITE ${OUT}.tmp "${body}")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
file(REMOVE ${OUT}.tmp)
