"""The demo recipe's dictionary reading and pair cleaning (scripts/demo), on
hand-written dictd snippets. Expected values are worked out by hand from the
dictd format (base64 offsets into the uncompressed .dict text) and from the
Ding markup rules the functions document; no installed dictionary is needed."""

import gzip

import pytest

from scripts.demo.freedict import (
    Entry,
    b64_number,
    clean,
    drop_pronunciation,
    headword_text,
    looks_like_sentence,
    parse_entry,
    read_entries,
    read_header,
    split_alternatives,
)
from scripts.demo.pairs import acceptable, casual_variants, collect_candidates, group_key, split_pairs

# --------------------------------------------------------------------------- files


@pytest.mark.parametrize(
    "text, value",
    [
        ("A", 0),
        ("B", 1),
        ("Z", 25),
        ("a", 26),
        ("z", 51),
        ("0", 52),
        ("9", 61),
        ("+", 62),
        ("/", 63),
        ("BA", 64),  # 1*64 + 0: most significant digit first
        ("Bg", 96),  # 1*64 + 32
        ("CAA", 8192),  # 2*64*64
        ("//", 4095),  # 63*64 + 63
    ],
)
def test_b64_numbers_are_most_significant_digit_first(text, value):
    assert b64_number(text) == value


# Three entries laid out by hand. Byte lengths (UTF-8: ˈ and ö take two bytes):
#   header "00-database-info\n" (17) + 52 x "x" + "\n"  = 70 bytes at 0   -> A, BG
#   "cat /kˈat/ <n>\n" (16) + "Katze {f}\n" (10)         = 26 bytes at 70  -> BG, a
#   "dog <n>\n" (8) + "Hund {m}, Köter {m}\n" (21)      = 29 bytes at 96  -> Bg, d
HEADER = "00-database-info\n" + "x" * 52 + "\n"
CAT = "cat /kˈat/ <n>\nKatze {f}\n"
DOG = "dog <n>\nHund {m}, Köter {m}\n"
INDEX = (
    "00-database-info\tA\tBG\n"
    "cat\tBG\ta\n"
    "computerised axial tomography\tBG\ta\n"  # a second headword of the same entry
    "dog\tBg\td\n"
)


@pytest.fixture
def tiny_dict(tmp_path):
    assert [len(t.encode()) for t in (HEADER, CAT, DOG)] == [70, 26, 29]  # the layout above
    (tmp_path / "freedict-eng-deu.dict.dz").write_bytes(gzip.compress((HEADER + CAT + DOG).encode()))
    (tmp_path / "freedict-eng-deu.index").write_text(INDEX, encoding="utf-8")
    return str(tmp_path)


def test_read_entries_follows_the_index_once_per_entry_without_the_header(tiny_dict):
    assert read_entries(tiny_dict, "eng-deu") == [CAT, DOG]


def test_read_entries_returns_entries_in_file_order(tmp_path):
    text = HEADER + CAT + DOG
    (tmp_path / "freedict-x.dict.dz").write_bytes(gzip.compress(text.encode()))
    (tmp_path / "freedict-x.index").write_text("dog\tBg\td\ncat\tBG\ta\n", encoding="utf-8")
    assert read_entries(str(tmp_path), "x") == [CAT, DOG]


def test_read_header_is_the_start_of_the_dictionary(tiny_dict):
    assert read_header(tiny_dict, "eng-deu").startswith("00-database-info\nxxx")


# --------------------------------------------------------------------------- entries

DOG_ENTRY = (
    "dog /dˈɒɡ/ <n>\n"
    "Hund {m} [zool.], Bandhaken {m} [techn.]\n"
    '"The dog barks." - Der Hund bellt.\n'
    '"a dog\'s life" - ein Hundeleben\n'
    "see: {hound}, {puppy}\n"
    "Note: a cooper's tool is meant by Bandhaken\n"
)


def test_parse_entry_reads_examples_cross_references_notes_and_labels():
    assert parse_entry(DOG_ENTRY) == Entry(
        headword="dog /dˈɒɡ/ <n>",
        translations="Hund {m} [zool.], Bandhaken {m} [techn.]",
        examples=[("The dog barks.", "Der Hund bellt."), ("a dog's life", "ein Hundeleben")],
        n_see=2,
        has_note=True,
        domain=True,  # [techn.] is a subject; [zool.] alone would not be
    )


def test_usage_and_region_labels_do_not_make_a_domain():
    entry = parse_entry("lift <n>\nAufzug {m} [Br.] [ugs.], Fahrstuhl {m} [zool.]\n")
    assert entry.domain is False
    assert (entry.examples, entry.n_see, entry.has_note) == ([], 0, False)


@pytest.mark.parametrize("text", ["dog <n>", "dog <n>\n", "dog <n>\n   \n"])
def test_an_entry_without_translations_is_skipped(text):
    assert parse_entry(text) is None


# --------------------------------------------------------------------------- markup


def test_drop_pronunciation_removes_ipa_but_keeps_slashed_words():
    assert drop_pronunciation(" cat /kˈat/ <n>") == " cat <n>"
    assert drop_pronunciation(" either /or/ both") == " either /or/ both"  # no IPA letters inside


@pytest.mark.parametrize(
    "raw, text",
    [
        ("cat /kˈat/ <n>", "cat"),  # pronunciation and grammar tag
        ("Hund {m} [zool.]", "Hund"),  # gender and subject label
        ("(sich) erinnern", "erinnern"),
        ("Haus (alt [Br.])", "Haus"),  # nested brackets
        ("Er bleibt (da) .", "Er bleibt."),  # no space left before the full stop
        ("colour/color", "colour"),  # a/b keeps a
        ("Farbe / Färbung", "Farbe"),
        ("rot/grün/blau", "rot"),
        ("- Hund,", "Hund"),  # stray separators at the ends
        ("bis 1,000 ...", ""),  # an ellipsis: not a translation
        ("24/7", ""),  # a slash not between words is leftover markup
        ("Haus = Heim", ""),
        ("siehe www.example.org", ""),
        ("1984", ""),  # no letter
        ("<n>", ""),  # nothing left
    ],
)
def test_clean(raw, text):
    assert clean(raw) == text


def test_headword_text_drops_pronunciations_and_the_bracketed_abbreviation():
    assert headword_text("computed axial tomography /kəmpjˈuːtɪd/ (CAT /kˈat/)") == "computed axial tomography"


def test_split_alternatives_on_commas_outside_brackets():
    # "Hund {m}" -> "Hund" + its space + one space for the blanked "{m}"
    assert split_alternatives("Hund {m}, Köter {m}", sentence=False) == ["Hund  ", "Köter  "]
    assert [t.strip() for t in split_alternatives("Haus (groß, alt), Heim", sentence=False)] == ["Haus", "Heim"]


def test_split_alternatives_keeps_thousands_together():
    assert split_alternatives("1,000 Euro, tausend Euro", sentence=False) == ["1,000 Euro", "tausend Euro"]


def test_sentences_split_only_after_a_sentence_end():
    text = "Wie geht es dir, Peter?, Wie geht's?"
    assert split_alternatives(text, sentence=True) == ["Wie geht es dir, Peter?", "Wie geht's?"]


def test_split_alternatives_drops_a_glued_abbreviation_with_its_pronunciation():
    text = "Straße <fem>Str.,  /ˈstrɑːsə/, Gasse"
    assert [t.strip() for t in split_alternatives(text, sentence=False)] == ["Straße", "Gasse"]


@pytest.mark.parametrize(
    "text, english, sentence",
    [
        ("Good morning!", True, True),
        ("I didn't shadow the official all the time, but", True, True),  # a capital and 4+ words
        ("the big old dog", True, False),
        ("dog", True, False),
        ("Der Hund bellt laut", False, False),  # German nouns are capitalised: punctuation needed
        ("Der Hund bellt.", False, True),
    ],
)
def test_looks_like_sentence(text, english, sentence):
    assert looks_like_sentence(text, english) is sentence


# --------------------------------------------------------------------------- pairs


@pytest.mark.parametrize(
    "en, de, ok",
    [
        ("dog", "Hund", True),
        ("long-hair cat", "Langhaarkatze", True),  # a long compound is fine
        ("ox", "Rindviehzüchtereien", False),  # 19 characters > 4 * 2 + 10
        ("elephant", "ein sehr großes graues Tier", False),  # 1 word against 5: an explanation
        (" ".join(["word"] * 26), " ".join(["Wort"] * 26), False),  # more than max_words
    ],
)
def test_acceptable(en, de, ok):
    assert acceptable(en, de, max_words=25) is ok


def test_group_key_ignores_case_and_punctuation():
    assert group_key("Good morning!") == group_key("good  morning") == "good morning"
    assert group_key("don't-stop, please.") == "don't-stop please"


def test_casual_variants():
    assert casual_variants("Good morning!", "Guten Morgen!") == [
        ("Good morning", "Guten Morgen"),
        ("good morning", "Guten Morgen"),
    ]
    assert casual_variants("I love you.", "Ich liebe dich.") == [("I love you", "Ich liebe dich")]
    assert casual_variants("dog", "Hund") == []
    assert casual_variants("This is far too long a phrase.", "Das ist zu lang.") == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_split_keeps_case_and_punctuation_variants_together(seed):
    pairs = [
        ("Good morning!", "Guten Morgen!"),
        ("good morning", "Guten Morgen"),
        ("cat", "Katze"),
        ("dog", "Hund"),
        ("house", "Haus"),
    ]
    train, valid, test = split_pairs(pairs, seed, n_test=1, n_valid=1)
    assert len(test) == len(valid) == 1
    assert set(train + valid + test) <= set(pairs)
    held_out = {group_key(en) for en, _ in valid + test}
    assert not held_out & {group_key(en) for en, _ in train}
    assert len(train) == len(pairs) - sum(2 if k == "good morning" else 1 for k in held_out)


def test_collect_candidates_weighs_both_dictionaries(tmp_path):
    # eng-deu: one entry with one example -> weight 1 + 0.5; Hund rank 0 gets 1.5,
    # Köter rank 1 gets 1.5 / 2; the example counts 1.
    # deu-eng, flipped: Hund -> dog (rank 0) and hound (rank 1) at half weight: 0.5, 0.25.
    eng_deu = 'dog <n>\nHund {m}, Köter {m}\n"The dog barks." - Der Hund bellt.\n'
    deu_eng = "Hund {m}\ndog, hound\n"
    # byte lengths: 8 + 21 + 35 = 64 -> "BA"; 9 + 11 = 20 -> "U"
    for name, text, length in (("eng-deu", eng_deu, "BA"), ("deu-eng", deu_eng, "U")):
        (tmp_path / f"freedict-{name}.dict.dz").write_bytes(gzip.compress(text.encode()))
        (tmp_path / f"freedict-{name}.index").write_text(f"x\tA\t{length}\n", encoding="utf-8")
    candidates = collect_candidates(str(tmp_path), max_words=25)
    assert {en: dict(de) for en, de in candidates.items()} == {
        "dog": {"Hund": 2.0, "Köter": 0.75},
        "The dog barks.": {"Der Hund bellt.": 1.0},
        "hound": {"Hund": 0.25},
    }
