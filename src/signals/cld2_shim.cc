// cld2_shim.cc — the one C++ file of vsr: a C entry point to CLD2, whose API
// is C++ only.  CLD2 keeps no mutable state, so this is safe from any thread.
#include <cstdio>  // compact_lang_det.h uses FILE without including it
#include <cstring>

#include <cld2/public/compact_lang_det.h>

extern "C" int vsr__cld2_detect(const char *text, size_t len, char *code, size_t code_cap, int *percent,
                                int *reliable);

extern "C" int vsr__cld2_detect(const char *text, size_t len, char *code, size_t code_cap, int *percent,
                                int *reliable)
{
    *percent = 0;
    *reliable = 0;
    if (code_cap)
        code[0] = '\0';
    if (len == 0 || len > 0x7fffffff)
        return 0;
    CLD2::CLDHints hints = {nullptr, nullptr, 0, CLD2::UNKNOWN_LANGUAGE};
    CLD2::Language lang3[3];
    int percent3[3];
    double scores3[3];
    int text_bytes = 0;
    bool is_reliable = false;
    int valid_prefix = 0;
    // best effort: short prompts (a greeting, one question) still get an answer
    const int flags = CLD2::kCLDFlagBestEffort;
    CLD2::Language lang = CLD2::ExtDetectLanguageSummaryCheckUTF8(text, static_cast<int>(len), true, &hints, flags,
                                                                  lang3, percent3, scores3, nullptr, &text_bytes,
                                                                  &is_reliable, &valid_prefix);
    if (valid_prefix < static_cast<int>(len)) {
        // invalid UTF-8: CLD2 refuses the whole text, so judge the valid prefix
        if (valid_prefix <= 0)
            return 0;
        lang = CLD2::ExtDetectLanguageSummaryCheckUTF8(text, valid_prefix, true, &hints, flags, lang3, percent3,
                                                       scores3, nullptr, &text_bytes, &is_reliable, &valid_prefix);
    }
    if (lang == CLD2::UNKNOWN_LANGUAGE || lang == CLD2::TG_UNKNOWN_LANGUAGE)
        return 0;
    const char *c = CLD2::LanguageCode(lang);
    if (!c || !*c || std::strcmp(c, "un") == 0)
        return 0;
    std::snprintf(code, code_cap, "%s", c);
    for (int i = 0; i < 3; i++) {
        if (lang3[i] == lang) {
            *percent = percent3[i];
            break;
        }
    }
    *reliable = is_reliable ? 1 : 0;
    return 1;
}
