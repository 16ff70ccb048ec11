// SPDX-License-Identifier: GPL-2.0
/*
 * Test-only module: fires one WARN_ON at load so the VM rig's test suite
 * can prove that the rig fails a run whose kernel log shows a warning.
 * Never installed; built only into the test tree.
 */
#include <linux/bug.h>
#include <linux/init.h>
#include <linux/module.h>

static int __init pvfs_warntest_init(void)
{
	WARN_ON(1);
	return 0;
}

static void __exit pvfs_warntest_exit(void)
{
}

module_init(pvfs_warntest_init);
module_exit(pvfs_warntest_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("pvfs VM rig self-test: deliberate WARN_ON");
