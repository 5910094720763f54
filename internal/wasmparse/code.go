package wasmparse

// The code section: each function body's size, its locals and how deep its
// blocks nest, checked against the structural limits (limits.go). The
// instructions are decoded only as far as their immediates go, to find the
// next opcode; validating them is the engine's job.

// code checks the code section's bodies.
func code(s *reader) error {
	n, err := s.Count(1)
	if err != nil {
		return err
	}
	for i := range int(n) {
		size, err := s.U32()
		if err != nil {
			return err
		}
		if err := overLimit("function_size", uint64(size), MaxFunctionSize, i); err != nil {
			return err
		}
		body, err := s.Bytes(int(size))
		if err != nil {
			return err
		}
		if err := funcBody(&reader{B: body, Err: s.Err}, i); err != nil {
			return err
		}
	}
	return nil
}

// funcBody checks one body: locals, then instructions to the final end.
func funcBody(r *reader, fn int) error {
	groups, err := r.Count(2)
	if err != nil {
		return err
	}
	locals := uint64(0)
	for range groups {
		c, err := r.U32()
		if err != nil {
			return err
		}
		locals += uint64(c)
		if err := overLimit("locals", locals, MaxLocals, fn); err != nil {
			return err
		}
		if err := r.ValType(); err != nil {
			return err
		}
	}
	depth := 0
	for {
		op, err := r.Byte()
		if err != nil {
			return err
		}
		if err := immediates(r, op); err != nil {
			return err
		}
		switch op {
		case 0x02, 0x03, 0x04, 0x06, 0x1f: // block loop if try try_table
			depth++
			if err := overLimit("block_depth", uint64(depth), MaxBlockDepth, fn); err != nil {
				return err
			}
		case 0x0b: // end
			if depth == 0 {
				return nil // the body's own end; bytes after it are the engine's to refuse
			}
			depth--
		case 0x18: // delegate ends a try
			if depth > 0 {
				depth--
			}
		}
	}
}

// blocktype skips a block type: empty, a value type, or a type index.
func blocktype(r *reader) error {
	if r.Off >= len(r.B) {
		return r.Fail("unexpected end")
	}
	b := r.B[r.Off]
	switch {
	case b == 0x40:
		r.Off++
		return nil
	case b == 0x63 || b == 0x64:
		return r.ValType()
	case b >= 0x6a && b <= 0x7f: // one-byte value types
		r.Off++
		return nil
	}
	start := r.Off // s33 type index
	if _, err := r.LEB(); err != nil {
		return err
	}
	if r.Off-start > 5 {
		return r.Fail("block type index over 5 bytes")
	}
	return nil
}

func memarg(r *reader) error {
	align, err := r.LEB()
	if err != nil {
		return err
	}
	if align&0x40 != 0 { // multi-memory: a memory index follows
		if _, err := r.LEB(); err != nil {
			return err
		}
	}
	_, err = r.LEB()
	return err
}

// vector skips a count of LEB128 numbers (plus extra more).
func lebs(r *reader, extra uint64) error {
	n, err := r.LEB()
	if err != nil {
		return err
	}
	if n > uint64(len(r.B)-r.Off) {
		return r.Fail("a vector of %d entries is more than the body holds", n)
	}
	for range n + extra {
		if _, err := r.LEB(); err != nil {
			return err
		}
	}
	return nil
}

// immediates skips an instruction's immediates.
func immediates(r *reader, op byte) error {
	var err error
	switch {
	case op == 0x02 || op == 0x03 || op == 0x04 || op == 0x06: // block loop if try
		err = blocktype(r)
	case op == 0x0c || op == 0x0d || op == 0x07 || op == 0x08 || op == 0x09 || op == 0x18 || op == 0xd5 || op == 0xd6:
		// br br_if catch throw rethrow delegate br_on_null br_on_non_null
		_, err = r.U32()
	case op == 0x0e: // br_table: labels and the default
		err = lebs(r, 1)
	case op == 0x10 || op == 0x12 || op == 0xd2 || op == 0x14 || op == 0x15: // call return_call ref.func call_ref return_call_ref
		_, err = r.U32()
	case op == 0x11 || op == 0x13: // call_indirect return_call_indirect: type, table
		if _, err = r.U32(); err == nil {
			_, err = r.U32()
		}
	case op == 0x1c: // select t*
		var n uint64
		if n, err = r.LEB(); err != nil {
			return err
		}
		if n > uint64(len(r.B)-r.Off) {
			return r.Fail("select of %d types", n)
		}
		for range n {
			if err = r.ValType(); err != nil {
				return err
			}
		}
	case op == 0x1f: // try_table bt vec(catch)
		if err = blocktype(r); err != nil {
			return err
		}
		var n uint64
		if n, err = r.LEB(); err != nil {
			return err
		}
		if n > uint64(len(r.B)-r.Off) {
			return r.Fail("try_table of %d catches", n)
		}
		for range n {
			kind, err := r.Byte()
			if err != nil {
				return err
			}
			if kind == 0 || kind == 1 { // catch, catch_ref: tag then label
				if _, err := r.LEB(); err != nil {
					return err
				}
			}
			if _, err := r.LEB(); err != nil {
				return err
			}
		}
	case op >= 0x20 && op <= 0x26: // locals, globals, table.get/set
		_, err = r.U32()
	case op >= 0x28 && op <= 0x3e: // loads and stores
		err = memarg(r)
	case op == 0x3f || op == 0x40 || op == 0x41 || op == 0x42 || op == 0xd0:
		// memory.size memory.grow i32.const i64.const ref.null
		_, err = r.LEB()
	case op == 0x43:
		err = r.Skip(4)
	case op == 0x44:
		err = r.Skip(8)
	case op == 0xfc:
		err = miscImmediates(r)
	case op == 0xfd:
		err = simdImmediates(r)
	case op == 0xfe:
		err = atomicImmediates(r)
	case op <= 0x01, op == 0x05, op == 0x0a, op == 0x0b, op == 0x0f, op == 0x19, op == 0x1a, op == 0x1b,
		op >= 0x45 && op <= 0xc4, op == 0xd1, op == 0xd3, op == 0xd4:
		// no immediates
	default:
		return r.Fail("opcode %#x", op)
	}
	return err
}

func miscImmediates(r *reader) error {
	sub, err := r.LEB()
	if err != nil {
		return err
	}
	switch {
	case sub <= 7: // saturating truncations
		return nil
	case sub == 8 || sub == 10 || sub == 12 || sub == 14: // memory.init memory.copy table.init table.copy
		if _, err := r.LEB(); err != nil {
			return err
		}
		_, err = r.LEB()
	case sub == 9 || sub == 11 || sub == 13 || sub == 15 || sub == 16 || sub == 17:
		// data.drop memory.fill elem.drop table.grow table.size table.fill
		_, err = r.LEB()
	default:
		return r.Fail("0xfc opcode %d", sub)
	}
	return err
}

func simdImmediates(r *reader) error {
	sub, err := r.LEB()
	if err != nil {
		return err
	}
	switch {
	case sub <= 11 || sub == 92 || sub == 93: // loads, store, load*_zero
		return memarg(r)
	case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
		return r.Skip(16)
	case sub >= 21 && sub <= 34: // extract/replace lane
		return r.Skip(1)
	case sub >= 84 && sub <= 91: // load/store lane
		if err := memarg(r); err != nil {
			return err
		}
		return r.Skip(1)
	case sub <= 0x113:
		return nil
	}
	return r.Fail("0xfd opcode %d", sub)
}

func atomicImmediates(r *reader) error {
	sub, err := r.LEB()
	if err != nil {
		return err
	}
	switch {
	case sub == 3: // atomic.fence
		return r.Skip(1)
	case sub <= 0x4e:
		return memarg(r)
	}
	return r.Fail("0xfe opcode %d", sub)
}
