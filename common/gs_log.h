/* gs_log.h — logging for the agent, the plugin and the tools (never the hook).
 *
 * Lines go to stderr as "<level> <component>: message".  Library code in
 * common/ does not log except at debug level; programs log at their top. */
#ifndef GS_LOG_H
#define GS_LOG_H

#include "gs_util.h"

enum gs_log_level { GS_LOG_ERROR = 0, GS_LOG_WARN = 1, GS_LOG_INFO = 2, GS_LOG_DEBUG = 3 };

/* pre: name is a static string such as "agent" or "plugin". */
void gs_log_init(const char *name, int level);
void gs_log_set_level(int level);
int gs_log_get_level(void);
/* Parses "error|warn|info|debug" or a digit 0-3; -EINVAL otherwise. */
int gs_log_parse_level(const char *s) GS_WUR;
void gs_log(int level, const char *fmt, ...) GS_PRINTF(2, 3);

#define log_error(...) gs_log(GS_LOG_ERROR, __VA_ARGS__)
#define log_warn(...) gs_log(GS_LOG_WARN, __VA_ARGS__)
#define log_info(...) gs_log(GS_LOG_INFO, __VA_ARGS__)
#define log_debug(...) gs_log(GS_LOG_DEBUG, __VA_ARGS__)

#endif
