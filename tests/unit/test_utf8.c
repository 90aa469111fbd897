/* Unit tests of the UTF-8 checks shared by the JSON, pprof and Pyroscope encoders. */
#include "export/utf8.h"
#include "unit.h"

#define U(s) ((const unsigned char *)(s))

static void test_seq_len(void)
{
  CHECK_EQ(utf8_seq_len(U("a"), 1), 1);
  CHECK_EQ(utf8_seq_len(U("\xc3\xa9"), 2), 2);         /* é */
  CHECK_EQ(utf8_seq_len(U("\xe2\x82\xac"), 3), 3);     /* € */
  CHECK_EQ(utf8_seq_len(U("\xf0\x9f\x98\x80"), 4), 4); /* U+1F600 */
  CHECK_EQ(utf8_seq_len(U("\xf4\x8f\xbf\xbf"), 4), 4); /* U+10FFFF, the last */
  CHECK_EQ(utf8_seq_len(U("\xc0\xaf"), 2), 0);         /* overlong '/' */
  CHECK_EQ(utf8_seq_len(U("\xc1\xbf"), 2), 0);         /* overlong */
  CHECK_EQ(utf8_seq_len(U("\xe0\x9f\xbf"), 3), 0);     /* overlong 3-byte */
  CHECK_EQ(utf8_seq_len(U("\xf0\x8f\xbf\xbf"), 4), 0); /* overlong 4-byte */
  CHECK_EQ(utf8_seq_len(U("\xed\xa0\x80"), 3), 0);     /* U+D800, a surrogate */
  CHECK_EQ(utf8_seq_len(U("\xed\x9f\xbf"), 3), 3);     /* U+D7FF, just below */
  CHECK_EQ(utf8_seq_len(U("\xf4\x90\x80\x80"), 4), 0); /* U+110000 */
  CHECK_EQ(utf8_seq_len(U("\xf5\x80\x80\x80"), 4), 0); /* no such lead byte */
  CHECK_EQ(utf8_seq_len(U("\x80"), 1), 0);             /* a lone continuation */
  CHECK_EQ(utf8_seq_len(U("\xe2\x82"), 2), 0);         /* cut by the length */
  CHECK_EQ(utf8_seq_len(U("\xe2\x82\xac"), 2), 0);     /* cut by n, not by the bytes */
  CHECK_EQ(utf8_seq_len(U("\xf0\x9f\x98\x80"), 3), 0);
  CHECK_EQ(utf8_seq_len(U("\xe2\x82\x41"), 3), 0); /* a non-continuation third byte */
}

static void test_valid_prefix(void)
{
  CHECK_EQ(utf8_valid_prefix("", 0), 0);
  CHECK_EQ(utf8_valid_prefix("plain", 5), 5);
  CHECK_EQ(utf8_valid_prefix("caf\xc3\xa9", 5), 5);
  CHECK_EQ(utf8_valid_prefix("caf\xe9!", 5), 3);       /* Latin-1 é */
  CHECK_EQ(utf8_valid_prefix("ab\xe2\x82\xac", 4), 2); /* the euro sign cut at 4 bytes */
}

static void test_fix(void)
{
  char latin1[] = "caf\xe9 cr\xe8me";
  char mixed[] = "\xc3\xa9\xed\xa0\x80x\xe2\x82";
  char fine[] = "\xe2\x82\xac 5";

  CHECK_EQ(utf8_fix(latin1), 2);
  CHECK_STR(latin1, "caf? cr?me");
  /* The surrogate's three bytes each become '?', the cut sequence at the end too. */
  CHECK_EQ(utf8_fix(mixed), 5);
  CHECK_STR(mixed, "\xc3\xa9???x??");
  CHECK_EQ(utf8_fix(fine), 0);
  CHECK_STR(fine, "\xe2\x82\xac 5");
}

int main(void)
{
  RUN(test_seq_len);
  RUN(test_valid_prefix);
  RUN(test_fix);
  UNIT_EXIT();
}
