package rmqfake

// SQL92 filters as the RocketMQ 5.5.0 broker compiles and evaluates them
// (rocketmq-filter's SelectorParser and the expression classes, read from
// the 5.5.0 jar; docs/broker-semantics.md scenario q pins the behaviour on a
// real broker). A hand-written recursive-descent parser for that grammar:
//
//	selector   := or                         (must be boolean; trailing input ignored)
//	or         := and (OR and)*
//	and        := equality (AND equality)*
//	equality   := comparison ( = comparison | <> comparison | IS NULL | IS NOT NULL )*
//	comparison := unary ( > unary | >= unary | < unary | <= unary
//	                    | [NOT] CONTAINS str | [NOT] STARTSWITH str | [NOT] ENDSWITH str
//	                    | [NOT] BETWEEN unary AND unary | [NOT] IN ( str {, str} ) )*
//	unary      := + unary | - unary | NOT unary | primary
//	primary    := literal | identifier | ( or )
//
// Values follow Java's: property values are strings, literals are Integer,
// Long, Double, String or Boolean, and comparisons convert a string to the
// other side's type with Integer.valueOf, Long.valueOf, Double.valueOf or
// Boolean.valueOf. A failed conversion aborts the whole evaluation (the
// message does not match), and a missing property is unknown (null).

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// sqlType is the Java class of an evaluated value.
type sqlType uint8

const (
	sqlNull sqlType = iota
	sqlBool
	sqlInt    // java.lang.Integer
	sqlLong   // java.lang.Long
	sqlDouble // java.lang.Double
	sqlString
)

// sqlVal is one value: null, a Boolean, an Integer/Long (n), a Double (f)
// or a String (s).
type sqlVal struct {
	t sqlType
	b bool
	n int64
	f float64
	s string
}

var (
	sqlNullVal  = sqlVal{}
	sqlTrueVal  = sqlVal{t: sqlBool, b: true}
	sqlFalseVal = sqlVal{t: sqlBool}
)

func sqlBoolVal(b bool) sqlVal {
	if b {
		return sqlTrueVal
	}
	return sqlFalseVal
}

// errSQLAbort is an exception during evaluation (a failed conversion, a
// Boolean compared with a String): the broker drops the message.
var errSQLAbort = errors.New("sql92: evaluation failed")

type sqlOp uint8

const (
	opLit sqlOp = iota
	opProp
	opNeg
	opNot
	opCast // boolean cast of a property
	opAnd
	opOr
	opEq
	opGt
	opGe
	opLt
	opLe
	opIn
	opContains
	opStarts
	opEnds
)

// sqlNode is a compiled expression.
type sqlNode struct {
	op   sqlOp
	l, r *sqlNode
	lit  sqlVal   // opLit
	name string   // opProp; the search string of opContains/opStarts/opEnds
	in   []string // opIn
	not  bool     // opIn and the string tests: the NOT form
}

// boolean reports whether n is a BooleanExpression in the broker's model.
func (n *sqlNode) boolean() bool {
	switch n.op {
	case opLit:
		return n.lit.t == sqlBool || n.lit.t == sqlNull
	case opProp, opNeg:
		return false
	}
	return true
}

// sqlExpr is a compiled SQL92 filter.
type sqlExpr struct {
	root *sqlNode
}

// sqlParseError is a failure to compile: the broker answers
// SUBSCRIPTION_PARSE_FAILED.
type sqlParseError struct{ msg string }

func (e *sqlParseError) Error() string { return "sql92: " + e.msg }

// Token kinds.
type sqlTok uint8

const (
	tEOF sqlTok = iota
	tNot
	tAnd
	tOr
	tBetween
	tIn
	tTrue
	tFalse
	tNull
	tIs
	tContains
	tStartsWith
	tEndsWith
	tDecimal
	tFloat
	tString
	tID
	tEq
	tNe
	tGt
	tGe
	tLt
	tLe
	tLParen
	tComma
	tRParen
	tPlus
	tMinus
)

var sqlKeywords = map[string]sqlTok{
	"NOT": tNot, "AND": tAnd, "OR": tOr, "BETWEEN": tBetween, "IN": tIn,
	"TRUE": tTrue, "FALSE": tFalse, "NULL": tNull, "IS": tIs,
	"CONTAINS": tContains, "STARTSWITH": tStartsWith, "ENDSWITH": tEndsWith,
}

type sqlToken struct {
	t    sqlTok
	text string // the image (identifier, number) or the decoded string
}

// sqlMaxDepth bounds the parser's recursion. The broker's generated parser
// overflows its stack somewhere between 300 and 1000 nested parentheses
// (each costs six frames) and between 1000 and 10000 nested NOTs; both
// fail to compile. Counted in the same frames.
const sqlMaxDepth = 3000

// sqlMaxEvalDepth bounds evaluation: the broker catches the
// StackOverflowError of a very deep expression and drops the message.
const sqlMaxEvalDepth = 10000

type sqlParser struct {
	src   string
	pos   int
	tok   sqlToken
	ahead bool // tok holds the next token
	depth int
}

// compileSQL92 compiles expr as SelectorParser.parse does.
func compileSQL92(expr string) (e *sqlExpr, err error) {
	p := &sqlParser{src: expr}
	defer func() {
		if r := recover(); r != nil {
			pe, ok := r.(*sqlParseError)
			if !ok {
				panic(r)
			}
			e, err = nil, pe
		}
	}()
	root := p.asBool(p.or())
	return &sqlExpr{root: root}, nil
}

func (p *sqlParser) fail(format string, args ...any) {
	panic(&sqlParseError{msg: fmt.Sprintf(format, args...)})
}

func (p *sqlParser) enter(frames int) {
	p.depth += frames
	if p.depth > sqlMaxDepth {
		p.fail("expression nested too deeply")
	}
}

func (p *sqlParser) leave(frames int) { p.depth -= frames }

// peek returns the next token, lexing it on first use (the generated
// parser lexes exactly one token past the expression).
func (p *sqlParser) peek() sqlToken {
	if !p.ahead {
		p.tok = p.lex()
		p.ahead = true
	}
	return p.tok
}

func (p *sqlParser) next() sqlToken {
	t := p.peek()
	p.ahead = false
	return t
}

func (p *sqlParser) expect(t sqlTok, what string) sqlToken {
	tk := p.next()
	if tk.t != t {
		p.fail("expected %s at offset %d", what, p.pos)
	}
	return tk
}

func sqlIsSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'
}

func sqlIsIDStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$'
}

func sqlIsDigit(c byte) bool { return c >= '0' && c <= '9' }

// lex reads one token at p.pos, skipping white space and comments. A
// character no token starts with is a lexical error.
func (p *sqlParser) lex() sqlToken {
	s := p.src
	for p.pos < len(s) {
		c := s[p.pos]
		switch {
		case sqlIsSpace(c):
			p.pos++
			continue
		case c == '-' && strings.HasPrefix(s[p.pos:], "--"):
			// A line comment needs its line end; without one it is two minuses.
			if end := strings.IndexAny(s[p.pos:], "\r\n"); end >= 0 {
				p.pos += end + 1
				continue
			}
		case c == '/' && strings.HasPrefix(s[p.pos:], "/*"):
			end := strings.Index(s[p.pos+2:], "*/")
			if end < 0 {
				p.fail("unterminated comment")
			}
			p.pos += 2 + end + 2
			continue
		}
		break
	}
	if p.pos >= len(s) {
		return sqlToken{t: tEOF}
	}
	start := p.pos
	c := s[p.pos]
	switch {
	case sqlIsIDStart(c):
		for p.pos < len(s) && (sqlIsIDStart(s[p.pos]) || sqlIsDigit(s[p.pos])) {
			p.pos++
		}
		word := s[start:p.pos]
		if k, ok := sqlKeywords[strings.ToUpper(word)]; ok {
			return sqlToken{t: k, text: word}
		}
		return sqlToken{t: tID, text: word}
	case sqlIsDigit(c) || c == '.' && p.pos+1 < len(s) && sqlIsDigit(s[p.pos+1]):
		return p.lexNumber()
	case c == '\'':
		var b strings.Builder
		p.pos++
		for {
			if p.pos >= len(s) {
				p.fail("unterminated string literal")
			}
			if s[p.pos] == '\'' {
				if p.pos+1 < len(s) && s[p.pos+1] == '\'' {
					b.WriteByte('\'')
					p.pos += 2
					continue
				}
				p.pos++
				return sqlToken{t: tString, text: b.String()}
			}
			b.WriteByte(s[p.pos])
			p.pos++
		}
	}
	p.pos++
	switch c {
	case '=':
		return sqlToken{t: tEq}
	case '<':
		if p.pos < len(s) && s[p.pos] == '>' {
			p.pos++
			return sqlToken{t: tNe}
		}
		if p.pos < len(s) && s[p.pos] == '=' {
			p.pos++
			return sqlToken{t: tLe}
		}
		return sqlToken{t: tLt}
	case '>':
		if p.pos < len(s) && s[p.pos] == '=' {
			p.pos++
			return sqlToken{t: tGe}
		}
		return sqlToken{t: tGt}
	case '(':
		return sqlToken{t: tLParen}
	case ')':
		return sqlToken{t: tRParen}
	case ',':
		return sqlToken{t: tComma}
	case '+':
		return sqlToken{t: tPlus}
	case '-':
		return sqlToken{t: tMinus}
	}
	p.fail("lexical error at offset %d", start)
	return sqlToken{}
}

// lexNumber reads the longest of DECIMAL_LITERAL ("0" | [1-9][0-9]*[lL]?)
// and FLOATING_POINT_LITERAL (digits "." digits? exp? | "." digits exp? |
// digits exp, exp = [eE][+-]?digits).
func (p *sqlParser) lexNumber() sqlToken {
	s, start := p.src, p.pos
	digits := func(i int) int {
		for i < len(s) && sqlIsDigit(s[i]) {
			i++
		}
		return i
	}
	exponent := func(i int) int { // end of an exponent at i, or i if none
		if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
			j := i + 1
			if j < len(s) && (s[j] == '+' || s[j] == '-') {
				j++
			}
			if k := digits(j); k > j {
				return k
			}
		}
		return i
	}
	// Floating point candidates.
	fend := -1
	if s[start] == '.' {
		fend = exponent(digits(start + 1))
	} else {
		i := digits(start)
		if i < len(s) && s[i] == '.' {
			fend = exponent(digits(i + 1))
		} else if e := exponent(i); e > i {
			fend = e
		}
	}
	// Decimal candidate.
	dend := start + 1
	if s[start] != '0' {
		dend = digits(start)
		if dend < len(s) && (s[dend] == 'l' || s[dend] == 'L') {
			dend++
		}
	}
	if s[start] == '.' || fend > dend {
		p.pos = fend
		return sqlToken{t: tFloat, text: s[start:fend]}
	}
	p.pos = dend
	return sqlToken{t: tDecimal, text: s[start:dend]}
}

func (p *sqlParser) asBool(n *sqlNode) *sqlNode {
	if n.boolean() {
		return n
	}
	if n.op == opProp {
		return &sqlNode{op: opCast, l: n}
	}
	p.fail("expression will not result in a boolean value")
	return nil
}

func (p *sqlParser) or() *sqlNode {
	p.enter(1)
	defer p.leave(1)
	left := p.and()
	for p.peek().t == tOr {
		p.next()
		right := p.and()
		left = &sqlNode{op: opOr, l: p.asBool(left), r: p.asBool(right)}
	}
	return left
}

func (p *sqlParser) and() *sqlNode {
	p.enter(1)
	defer p.leave(1)
	left := p.equality()
	for p.peek().t == tAnd {
		p.next()
		right := p.equality()
		left = &sqlNode{op: opAnd, l: p.asBool(left), r: p.asBool(right)}
	}
	return left
}

func (p *sqlParser) equality() *sqlNode {
	p.enter(1)
	defer p.leave(1)
	left := p.comparison()
	for {
		switch p.peek().t {
		case tEq:
			p.next()
			left = p.equal(left, p.comparison())
		case tNe:
			p.next()
			left = &sqlNode{op: opNot, l: p.equal(left, p.comparison())}
		case tIs:
			p.next()
			not := false
			if p.peek().t == tNot {
				p.next()
				not = true
			}
			p.expect(tNull, "NULL")
			left = &sqlNode{op: opEq, l: left, r: &sqlNode{op: opLit}}
			if not {
				left = &sqlNode{op: opNot, l: left}
			}
		default:
			return left
		}
	}
}

// equal builds l = r with ComparisonExpression.createEqual's checks.
func (p *sqlParser) equal(l, r *sqlNode) *sqlNode {
	for _, x := range []*sqlNode{l, r} {
		if x.op == opLit && x.lit.t == sqlNull {
			p.fail("'NULL' cannot be compared")
		}
	}
	if l.op == opLit && r.op == opLit && l.boolean() && !r.boolean() {
		p.fail("a boolean cannot be compared with a non-boolean constant")
	}
	return &sqlNode{op: opEq, l: l, r: r}
}

// ordered builds a <, <=, >, >= comparison with checkLessThanOperand.
func (p *sqlParser) ordered(op sqlOp, l, r *sqlNode) *sqlNode {
	for _, x := range []*sqlNode{l, r} {
		if x.op == opLit {
			if t := x.lit.t; t != sqlInt && t != sqlLong && t != sqlDouble {
				p.fail("value cannot be compared")
			}
		} else if x.boolean() {
			p.fail("value cannot be compared")
		}
	}
	return &sqlNode{op: op, l: l, r: r}
}

func (p *sqlParser) comparison() *sqlNode {
	p.enter(1)
	defer p.leave(1)
	left := p.unary()
	for {
		tk := p.peek()
		switch tk.t {
		case tGt, tGe, tLt, tLe:
			p.next()
			op := map[sqlTok]sqlOp{tGt: opGt, tGe: opGe, tLt: opLt, tLe: opLe}[tk.t]
			left = p.ordered(op, left, p.unary())
		case tNot, tContains, tStartsWith, tEndsWith, tBetween, tIn:
			// The broker's parser enters the loop on NOT and then needs one
			// of the NOT forms: "a NOT x" fails, it is not trailing input.
			p.next()
			kw, not := tk.t, false
			if kw == tNot {
				kw, not = p.next().t, true
			}
			switch kw {
			case tContains, tStartsWith, tEndsWith:
				op := map[sqlTok]sqlOp{tContains: opContains, tStartsWith: opStarts, tEndsWith: opEnds}[kw]
				left = &sqlNode{op: op, l: left, name: p.expect(tString, "a string literal").text, not: not}
			case tBetween:
				low := p.unary()
				p.expect(tAnd, "AND")
				high := p.unary()
				left = p.between(left, low, high, not)
			case tIn:
				p.expect(tLParen, "(")
				list := []string{p.expect(tString, "a string literal").text}
				for p.peek().t == tComma {
					p.next()
					list = append(list, p.expect(tString, "a string literal").text)
				}
				p.expect(tRParen, ")")
				if left.op != opProp {
					p.fail("expected a property for IN")
				}
				left = &sqlNode{op: opIn, l: left, in: list, not: not}
			default:
				p.fail("NOT must be followed by CONTAINS, STARTSWITH, ENDSWITH, BETWEEN or IN here")
			}
		default:
			return left
		}
	}
}

// between builds [NOT] BETWEEN as createBetween / createNotBetween do.
func (p *sqlParser) between(v, low, high *sqlNode, not bool) *sqlNode {
	if not {
		return &sqlNode{op: opOr, l: p.ordered(opLt, v, low), r: p.ordered(opGt, v, high)}
	}
	if low.op == opLit && high.op == opLit {
		if low.lit.t == sqlNull || high.lit.t == sqlNull {
			p.fail("illegal values of between: null")
		}
		if c, err := sqlCompare(high.lit, low.lit); err != nil || c < 0 {
			p.fail("illegal values of between: low above high")
		}
	}
	return &sqlNode{op: opAnd, l: p.ordered(opGe, v, low), r: p.ordered(opLe, v, high)}
}

func (p *sqlParser) unary() *sqlNode {
	p.enter(1)
	defer p.leave(1)
	switch p.peek().t {
	case tPlus:
		p.next()
		return p.unary()
	case tMinus:
		p.next()
		return &sqlNode{op: opNeg, l: p.unary()}
	case tNot:
		p.next()
		return &sqlNode{op: opNot, l: p.asBool(p.unary())}
	}
	return p.primary()
}

func (p *sqlParser) primary() *sqlNode {
	p.enter(1)
	defer p.leave(1)
	tk := p.next()
	switch tk.t {
	case tString:
		return &sqlNode{op: opLit, lit: sqlVal{t: sqlString, s: tk.text}}
	case tDecimal:
		return &sqlNode{op: opLit, lit: p.decimal(tk.text)}
	case tFloat:
		f, err := strconv.ParseFloat(tk.text, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			p.fail("bad number %q", tk.text)
		}
		// createFloat: above Double.MAX_VALUE or below Double.MIN_VALUE
		// (so 0.0 too) is refused.
		if math.IsInf(f, 0) || f < 4.9e-324 {
			p.fail("float out of range %q", tk.text)
		}
		return &sqlNode{op: opLit, lit: sqlVal{t: sqlDouble, f: f}}
	case tTrue:
		return &sqlNode{op: opLit, lit: sqlTrueVal}
	case tFalse:
		return &sqlNode{op: opLit, lit: sqlFalseVal}
	case tNull:
		return &sqlNode{op: opLit, lit: sqlNullVal}
	case tID:
		return &sqlNode{op: opProp, name: tk.text}
	case tLParen:
		n := p.or()
		p.expect(tRParen, ")")
		return n
	}
	p.fail("unexpected token at offset %d", p.pos)
	return nil
}

// decimal is ConstantExpression.createFromDecimal: a Long, kept as an
// Integer when it fits.
func (p *sqlParser) decimal(text string) sqlVal {
	text = strings.TrimRight(text, "lL")
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		p.fail("integer out of range %q", text)
	}
	if n >= math.MinInt32 && n <= math.MaxInt32 {
		return sqlVal{t: sqlInt, n: n}
	}
	return sqlVal{t: sqlLong, n: n}
}

// sqlProps gives the value of a property, ok=false when the message has
// none (or an empty one: the broker's decoder drops empty values).
type sqlProps func(name string) (string, bool)

// matches reports whether e evaluates to TRUE on props; an exception
// during evaluation is no match, as in ExpressionMessageFilter.
func (e *sqlExpr) matches(props sqlProps) bool {
	v, err := sqlEval(e.root, props, 0)
	return err == nil && v.t == sqlBool && v.b
}

func sqlEval(n *sqlNode, props sqlProps, depth int) (sqlVal, error) {
	if depth > sqlMaxEvalDepth {
		return sqlNullVal, errSQLAbort
	}
	depth++
	switch n.op {
	case opLit:
		return n.lit, nil
	case opProp:
		if v, ok := props(n.name); ok && v != "" {
			return sqlVal{t: sqlString, s: v}, nil
		}
		return sqlNullVal, nil
	case opNeg:
		v, err := sqlEval(n.l, props, depth)
		if err != nil {
			return v, err
		}
		switch v.t {
		case sqlInt:
			return sqlVal{t: sqlInt, n: int64(-int32(v.n))}, nil
		case sqlLong:
			return sqlVal{t: sqlLong, n: -v.n}, nil
		case sqlDouble:
			return sqlVal{t: sqlDouble, f: -v.f}, nil
		}
		return sqlNullVal, nil
	case opNot:
		v, err := sqlEval(n.l, props, depth)
		if err != nil {
			return v, err
		}
		switch v.t {
		case sqlNull:
			return v, nil
		case sqlBool:
			return sqlBoolVal(!v.b), nil
		}
		return sqlNullVal, errSQLAbort // ClassCastException
	case opCast:
		v, err := sqlEval(n.l, props, depth)
		if err != nil || v.t == sqlNull || v.t == sqlBool {
			return v, err
		}
		return sqlFalseVal, nil
	case opAnd, opOr:
		stop := n.op == opOr // OR stops at TRUE, AND at FALSE
		l, err := sqlEval(n.l, props, depth)
		if err != nil {
			return l, err
		}
		if l.t != sqlNull && l.t != sqlBool {
			return sqlNullVal, errSQLAbort
		}
		if l.t == sqlBool && l.b == stop {
			return l, nil
		}
		r, err := sqlEval(n.r, props, depth)
		if err != nil {
			return r, err
		}
		if r.t != sqlNull && r.t != sqlBool {
			return sqlNullVal, errSQLAbort
		}
		if r.t == sqlBool && r.b == stop {
			return r, nil
		}
		if l.t == sqlNull || r.t == sqlNull {
			return sqlNullVal, nil
		}
		return sqlBoolVal(!stop), nil
	case opEq:
		l, err := sqlEval(n.l, props, depth)
		if err != nil {
			return l, err
		}
		r, err := sqlEval(n.r, props, depth)
		if err != nil {
			return r, err
		}
		switch {
		case l.t == sqlNull && r.t == sqlNull:
			return sqlTrueVal, nil
		case l.t == sqlNull:
			return sqlNullVal, nil
		case r.t == sqlNull:
			return sqlFalseVal, nil
		case sqlEquals(l, r):
			return sqlTrueVal, nil
		}
		c, err := sqlCompare(l, r)
		if err != nil {
			return sqlNullVal, err
		}
		return sqlBoolVal(c == 0), nil
	case opGt, opGe, opLt, opLe:
		l, err := sqlEval(n.l, props, depth)
		if err != nil || l.t == sqlNull {
			return l, err
		}
		r, err := sqlEval(n.r, props, depth)
		if err != nil || r.t == sqlNull {
			return r, err
		}
		if l.t == sqlString && r.t == sqlString {
			// Both strings: compared as numbers (Double.valueOf), or abort.
			lf, ok1 := sqlParseDouble(l.s)
			rf, ok2 := sqlParseDouble(r.s)
			if !ok1 || !ok2 {
				return sqlNullVal, errSQLAbort
			}
			l, r = sqlVal{t: sqlDouble, f: lf}, sqlVal{t: sqlDouble, f: rf}
		}
		c, err := sqlCompare(l, r)
		if err != nil {
			return sqlNullVal, err
		}
		switch n.op {
		case opGt:
			return sqlBoolVal(c > 0), nil
		case opGe:
			return sqlBoolVal(c >= 0), nil
		case opLt:
			return sqlBoolVal(c < 0), nil
		}
		return sqlBoolVal(c <= 0), nil
	case opIn:
		v, err := sqlEval(n.l, props, depth)
		if err != nil || v.t != sqlString {
			return sqlNullVal, err
		}
		found := false
		for _, s := range n.in {
			if s == v.s {
				found = true
				break
			}
		}
		return sqlBoolVal(found != n.not), nil
	case opContains, opStarts, opEnds:
		if n.name == "" {
			return sqlFalseVal, nil // an empty search string is FALSE, NOT forms too
		}
		v, err := sqlEval(n.l, props, depth)
		if err != nil {
			return v, err
		}
		if v.t != sqlString {
			return sqlFalseVal, nil // missing or not a string: FALSE, NOT forms too
		}
		var hit bool
		switch n.op {
		case opContains:
			hit = strings.Contains(v.s, n.name)
		case opStarts:
			hit = strings.HasPrefix(v.s, n.name)
		default:
			hit = strings.HasSuffix(v.s, n.name)
		}
		return sqlBoolVal(hit != n.not), nil
	}
	return sqlNullVal, errSQLAbort
}

// sqlEquals is Object.equals between two non-null values: same class and
// value (Double compares bits, so NaN equals NaN and 0.0 is not -0.0).
func sqlEquals(a, b sqlVal) bool {
	if a.t != b.t {
		return false
	}
	switch a.t {
	case sqlBool:
		return a.b == b.b
	case sqlInt, sqlLong:
		return a.n == b.n
	case sqlDouble:
		return sqlDoubleBits(a.f) == sqlDoubleBits(b.f)
	case sqlString:
		return a.s == b.s
	}
	return true
}

func sqlDoubleBits(f float64) uint64 {
	if math.IsNaN(f) {
		return 0x7ff8000000000000
	}
	return math.Float64bits(f)
}

// sqlDoubleCompare is Double.compare.
func sqlDoubleCompare(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	x, y := int64(sqlDoubleBits(a)), int64(sqlDoubleBits(b))
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func sqlCmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sqlCompare is ComparisonExpression.__compare with string conversion on:
// values of different classes are converted (numbers widened, a string to
// the other side's class); classes that cannot be converted compare as -1;
// a failed conversion aborts.
func sqlCompare(l, r sqlVal) (int, error) {
	if l.t != r.t {
		var ok bool
		switch l.t {
		case sqlBool:
			if r.t == sqlString {
				return 0, errSQLAbort // the broker casts the Boolean to String
			}
			return -1, nil
		case sqlInt, sqlLong:
			switch r.t {
			case sqlInt, sqlLong:
				return sqlCmpInt(l.n, r.n), nil
			case sqlDouble:
				return sqlDoubleCompare(float64(l.n), r.f), nil
			case sqlString:
				if r, ok = sqlParseInteger(r.s, l.t); !ok {
					return 0, errSQLAbort
				}
				return sqlCmpInt(l.n, r.n), nil
			}
			return -1, nil
		case sqlDouble:
			switch r.t {
			case sqlInt, sqlLong:
				return sqlDoubleCompare(l.f, float64(r.n)), nil
			case sqlString:
				f, ok := sqlParseDouble(r.s)
				if !ok {
					return 0, errSQLAbort
				}
				return sqlDoubleCompare(l.f, f), nil
			}
			return -1, nil
		case sqlString:
			switch r.t {
			case sqlBool:
				l = sqlBoolVal(strings.EqualFold(l.s, "true") && len(l.s) == 4)
			case sqlInt, sqlLong:
				if l, ok = sqlParseInteger(l.s, r.t); !ok {
					return 0, errSQLAbort
				}
			case sqlDouble:
				f, ok := sqlParseDouble(l.s)
				if !ok {
					return 0, errSQLAbort
				}
				l = sqlVal{t: sqlDouble, f: f}
			default:
				return -1, nil
			}
		default:
			return -1, nil
		}
	}
	switch l.t {
	case sqlBool:
		return sqlCmpInt(sqlB2i(l.b), sqlB2i(r.b)), nil
	case sqlInt, sqlLong:
		return sqlCmpInt(l.n, r.n), nil
	case sqlDouble:
		return sqlDoubleCompare(l.f, r.f), nil
	case sqlString:
		return strings.Compare(l.s, r.s), nil // only equality matters here
	}
	return 0, nil
}

func sqlB2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// sqlParseInteger is Integer.valueOf (t sqlInt) or Long.valueOf (t
// sqlLong): an optional sign and decimal digits, any of Java's BMP decimal
// digits, no spaces, within range.
func sqlParseInteger(s string, t sqlType) (sqlVal, bool) {
	if s == "" {
		return sqlVal{}, false
	}
	neg := false
	i := 0
	if s[0] == '-' || s[0] == '+' {
		neg = s[0] == '-'
		i = 1
		if len(s) == 1 {
			return sqlVal{}, false
		}
	}
	limit := uint64(math.MaxInt64)
	if t == sqlInt {
		limit = math.MaxInt32
	}
	if neg {
		limit++
	}
	var n uint64
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		d, ok := sqlDigit(r)
		if !ok {
			return sqlVal{}, false
		}
		if n > (limit-uint64(d))/10 {
			return sqlVal{}, false
		}
		n = n*10 + uint64(d)
	}
	v := int64(n)
	if neg {
		v = -v // wraps to MinInt64 exactly when n is 1<<63
	}
	return sqlVal{t: t, n: v}, true
}

// sqlDigit is Character.digit(c, 10) for a char: a Unicode decimal digit
// of the Basic Multilingual Plane (a Java String holds others as two
// surrogates, which are no digits).
func sqlDigit(r rune) (int, bool) {
	if r >= '0' && r <= '9' {
		return int(r - '0'), true
	}
	if r > 0xFFFF || !unicode.IsDigit(r) {
		return 0, false
	}
	start := r
	for start > 0 && unicode.IsDigit(start-1) {
		start--
	}
	return int(r-start) % 10, true
}

// sqlParseDouble is Double.valueOf: the string trimmed of characters up
// to U+0020, then an optional sign and NaN, Infinity, a decimal or a
// hexadecimal floating-point literal with an optional f/F/d/D suffix.
func sqlParseDouble(s string) (float64, bool) {
	s = strings.TrimFunc(s, func(r rune) bool { return r <= ' ' })
	if s == "" {
		return 0, false
	}
	body := s
	neg := false
	if body[0] == '+' || body[0] == '-' {
		neg = body[0] == '-'
		body = body[1:]
	}
	switch body {
	case "NaN":
		return math.NaN(), true
	case "Infinity":
		if neg {
			return math.Inf(-1), true
		}
		return math.Inf(1), true
	}
	if n := len(body); n > 0 && strings.ContainsRune("fFdD", rune(body[n-1])) {
		body = body[:n-1]
	}
	if !sqlFloatSyntax(body) {
		return 0, false
	}
	f, err := strconv.ParseFloat(body, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	if neg {
		f = -f
	}
	return f, true
}

// sqlFloatSyntax checks an unsigned literal without suffix: digits with an
// optional point and exponent (at least one digit), or 0x hex digits with an
// optional point and a mandatory p exponent.
func sqlFloatSyntax(s string) bool {
	count := func(i int, ok func(byte) bool) int {
		j := i
		for j < len(s) && ok(s[j]) {
			j++
		}
		return j - i
	}
	isHex := func(c byte) bool { return sqlIsDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
	expo := func(i int, marks string) (int, bool) {
		if i < len(s) && strings.IndexByte(marks, s[i]) >= 0 {
			i++
			if i < len(s) && (s[i] == '+' || s[i] == '-') {
				i++
			}
			n := count(i, sqlIsDigit)
			return i + n, n > 0
		}
		return i, true
	}
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		i := 2
		a := count(i, isHex)
		i += a
		b := 0
		if i < len(s) && s[i] == '.' {
			i++
			b = count(i, isHex)
			i += b
		}
		if a+b == 0 || i >= len(s) || (s[i] != 'p' && s[i] != 'P') {
			return false
		}
		j, ok := expo(i, "pP")
		return ok && j == len(s)
	}
	i := 0
	a := count(i, sqlIsDigit)
	i += a
	b := 0
	if i < len(s) && s[i] == '.' {
		i++
		b = count(i, sqlIsDigit)
		i += b
	}
	if a+b == 0 {
		return false
	}
	j, ok := expo(i, "eE")
	return ok && j == len(s)
}

// sqlMessageProps is what a filter sees of m: its user properties and the
// system properties the 5.5.0 proxy and broker store with a message sent
// over gRPC (scenario q).
func sqlMessageProps(m *message) sqlProps {
	return func(name string) (string, bool) {
		var v string
		switch name {
		case "TAGS":
			v = m.tag()
		case "KEYS":
			v = strings.Join(m.keys(), " ")
		case "UNIQ_KEY":
			v = m.id
		case "PGROUP":
			if m.store != nil {
				v = m.store.key.name
				if m.store.key.ns != "" {
					v = m.store.key.ns + "%" + v
				}
			}
		case "BORN_TIMESTAMP":
			v = strconv.FormatInt(m.bornSec*1000+int64(m.bornNanos)/1e6, 10)
		case "__BORNHOST":
			v = m.bornHost
		case "RECONSUME_TIME":
			v = strconv.Itoa(int(m.reconsume))
		case "CLUSTER":
			v = "DefaultCluster"
		case "MSG_REGION":
			v = "DefaultRegion"
		case "TRACE_ON":
			v = "true"
		case "__SHARDINGKEY":
			v = m.msgGroup()
		case "TRACE_CONTEXT":
			v = m.trace()
		case "TIMER_DELIVER_MS":
			if at := m.deliverAt(); !at.IsZero() {
				v = strconv.FormatInt(at.UnixMilli(), 10)
			}
		default:
			v = m.props[name]
		}
		return v, v != ""
	}
}

// String prints the compiled expression back as SQL92 that compiles to the
// same tree: every operation in parentheses, BETWEEN and <> in the forms
// they compile to.
func (e *sqlExpr) String() string {
	var b strings.Builder
	e.root.print(&b)
	return b.String()
}

func (n *sqlNode) print(b *strings.Builder) {
	bin := func(op string) {
		b.WriteByte('(')
		n.l.print(b)
		b.WriteString(" " + op + " ")
		n.r.print(b)
		b.WriteByte(')')
	}
	not := ""
	if n.not {
		not = "NOT "
	}
	switch n.op {
	case opLit:
		switch n.lit.t {
		case sqlNull:
			b.WriteString("NULL")
		case sqlBool:
			if n.lit.b {
				b.WriteString("TRUE")
			} else {
				b.WriteString("FALSE")
			}
		case sqlInt, sqlLong:
			b.WriteString(strconv.FormatInt(n.lit.n, 10))
		case sqlDouble:
			b.WriteString(strconv.FormatFloat(n.lit.f, 'e', -1, 64))
		case sqlString:
			sqlQuote(b, n.lit.s)
		}
	case opProp:
		b.WriteString(n.name)
	case opCast:
		b.WriteByte('(')
		n.l.print(b)
		b.WriteByte(')')
	case opNeg, opNot:
		b.WriteByte('(')
		if n.op == opNeg {
			b.WriteString("- ")
		} else {
			b.WriteString("NOT ")
		}
		n.l.print(b)
		b.WriteByte(')')
	case opAnd:
		bin("AND")
	case opOr:
		bin("OR")
	case opEq:
		if n.r.op == opLit && n.r.lit.t == sqlNull {
			b.WriteByte('(')
			n.l.print(b)
			b.WriteString(" IS NULL)")
			return
		}
		bin("=")
	case opGt:
		bin(">")
	case opGe:
		bin(">=")
	case opLt:
		bin("<")
	case opLe:
		bin("<=")
	case opIn:
		b.WriteByte('(')
		n.l.print(b)
		b.WriteString(" " + not + "IN (")
		for i, s := range n.in {
			if i > 0 {
				b.WriteString(", ")
			}
			sqlQuote(b, s)
		}
		b.WriteString("))")
	case opContains, opStarts, opEnds:
		b.WriteByte('(')
		n.l.print(b)
		b.WriteString(" " + not + map[sqlOp]string{opContains: "CONTAINS", opStarts: "STARTSWITH", opEnds: "ENDSWITH"}[n.op] + " ")
		sqlQuote(b, n.name)
		b.WriteByte(')')
	}
}

func sqlQuote(b *strings.Builder, s string) {
	b.WriteByte('\'')
	b.WriteString(strings.ReplaceAll(s, "'", "''"))
	b.WriteByte('\'')
}
