/* empty.c — stands in for a layer with no sources yet, so CMake can configure. */
typedef int tgc_empty_translation_unit;
