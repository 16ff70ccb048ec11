// SPDX-License-Identifier: GPL-2.0
/* Placeholder: written by the kernel client work (issue 5). */
