/* recipe_keys.h — every recipe key declared once: its name, how its value
 * is read and stored, its default, the values it takes, how the resolved
 * recipe shows it, and its documentation. Parsing (the Lua binding),
 * defaults, the JSON echo, `vramplan keys` and the docs' reference are all
 * driven by this one table. */
#ifndef VP_RECIPE_KEYS_H
#define VP_RECIPE_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recipe.h"

typedef enum {
    VP_KEY_UINT,     /* an unsigned field: a whole number in [min, max] */
    VP_KEY_U64,      /* a uint64_t field: a whole number in [min, max] */
    VP_KEY_NUMBER,   /* a double field in [min, max] */
    VP_KEY_ELEMENTS, /* a double field counting elements: shown as a whole number */
    VP_KEY_BOOL,     /* a bool field */
    VP_KEY_TRISTATE, /* an int field: -1 until set, then 0 or 1 */
    VP_KEY_OPTION,   /* an enum field: the index of one of the key's choices */
    VP_KEY_TEXT,     /* text read by the key's own parser (lists, every-K) */
} vp_key_kind;

/* A resolved key's value as the recipe echo shows it. */
typedef enum { VP_VALUE_HIDDEN, VP_VALUE_INTEGER, VP_VALUE_NUMBER, VP_VALUE_BOOL, VP_VALUE_STRING } vp_value_kind;

typedef struct {
    vp_value_kind kind;
    int64_t integer;
    double number;
    bool boolean;
    const char *string; /* a static name, or `text` */
    char text[256];
} vp_key_value;

typedef struct vp_recipe_key {
    const char *name;
    vp_key_kind kind;
    size_t offset;               /* the field in vp_recipe */
    double min, max;             /* the accepted range of numbers */
    double fallback;             /* the default (an option's index; -1 for a tristate) */
    const char *const *choices;  /* an option's names, NULL-terminated ... */
    const char *(*choice_at)(unsigned index); /* ... or a registry's, NULL past the end */
    /* VP_KEY_TEXT: reads `text` (NULL when the value is no string; `shown`
     * is the value as a message shows it); false with `message` set when
     * it is not valid */
    bool (*parse_text)(vp_recipe *recipe, const char *key, const char *text, const char *shown, char *message,
                       size_t size);
    /* an option whose field is not the index itself (compute_dtype) */
    void (*store_option)(vp_recipe *recipe, unsigned index);
    /* the echo of the resolved recipe; NULL: the field as it is */
    void (*value)(const vp_recipe *resolved, vp_key_value *out);
    bool (*applies)(const vp_recipe *resolved); /* NULL: always echoed */
    bool hidden;                 /* never echoed (a tuning knob the echo has never shown) */
    const char *doc;
} vp_recipe_key;

/* At most this many keys are declared (a reader's bitmap of given keys). */
#define VP_RECIPE_KEYS_MAX 512
unsigned vp_recipe_key_count(void);
const vp_recipe_key *vp_recipe_key_at(unsigned index);
const vp_recipe_key *vp_recipe_key_find(const char *name);

/* The index-th value an option key takes, NULL past the last. */
const char *vp_recipe_key_choice(const vp_recipe_key *key, unsigned index);

/* Store a value already read and checked against the key's kind and range. */
void vp_recipe_key_set_integer(vp_recipe *recipe, const vp_recipe_key *key, int64_t value);
void vp_recipe_key_set_number(vp_recipe *recipe, const vp_recipe_key *key, double value);
void vp_recipe_key_set_bool(vp_recipe *recipe, const vp_recipe_key *key, bool value);
void vp_recipe_key_set_option(vp_recipe *recipe, const vp_recipe_key *key, unsigned index);

/* The key's value in a resolved recipe (vp_recipe_resolve), as the echo
 * shows it; VP_VALUE_HIDDEN when it does not apply (LoRA's keys without
 * LoRA) or is not echoed. */
void vp_recipe_key_value(const vp_recipe *resolved, const vp_recipe_key *key, vp_key_value *out);

/* The key's default as the echo would show it (whether or not the echo
 * shows the key for the default recipe): its documentation's "default". */
void vp_recipe_key_default(const vp_recipe_key *key, vp_key_value *out);

#endif
