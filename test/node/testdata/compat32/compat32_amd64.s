#include "textflag.h"

// func compat32Getpid() int32
TEXT ·compat32Getpid(SB), NOSPLIT, $0-4
	MOVL $20, AX // getpid in the i386 table
	INT $0x80
	MOVL AX, ret+0(FP)
	RET
