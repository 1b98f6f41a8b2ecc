/* gs_check.h — the one way every check suite runs: fork mode unless
 * CK_FORK=no (for gdb), exit status = whether any test failed. */
#ifndef GS_CHECK_H
#define GS_CHECK_H

#include <check.h>
#include <stdlib.h>

static inline int gs_check_run(Suite *s)
{
        SRunner *sr = srunner_create(s);
        int failed;

        srunner_set_fork_status(sr, CK_FORK_GETENV);
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
