//! Tests of `features.rs`: the answer ranker's features.

use super::*;

#[test]
fn a_name_is_cut_where_a_capitalised_word_goes_on_beside_it() {
    let text = "Written by Martin Klapetek. In Othtu, the GNOME Project met at Purdue University.";
    let span = |s: &str| {
        let at = text.find(s).unwrap();
        cuts_a_name(text, at, at + s.len())
    };
    assert!(span("Klapetek"));
    assert!(span("Martin"));
    assert!(!span("Martin Klapetek"));
    assert!(!span("Othtu"), "after a function word, before a comma");
    assert!(span("GNOME"));
    assert!(!span("GNOME Project"), "\"the\" is a function word");
    assert!(span("Purdue"));
    assert!(!span("Purdue University"));
}

#[test]
fn the_question_s_predicate_beside_a_span_is_found_in_its_clause() {
    let beside = |question: &str, title: &str, text: &str, span: &str| {
        let view = PassageView {
            words: ViewWord::all(text),
            sentences: Vec::new(),
            title: stems(title),
        };
        let at = text.find(span).unwrap();
        let first = view.words.iter().position(|w| w.start >= at).unwrap();
        let last = view
            .words
            .iter()
            .rposition(|w| w.end <= at + span.len())
            .unwrap();
        Question::new(question).predicate_beside(&view, first, last)
    };
    let work = "Which organisation did Urskogo Vorar work for?";
    let life = "He was admired by Keshasro Ekvu. He worked for the Mozeny Trading Company.";
    assert_eq!(
        beside(work, "Urskogo Vorar", life, "Mozeny Trading Company"),
        (true, false)
    );
    assert_eq!(
        beside(work, "Urskogo Vorar", life, "Keshasro Ekvu"),
        (false, false),
        "the clause ends after the name; \"admired\" is not asked about"
    );
    let founder = "Who was the founder of the Kivrun Society?";
    let society = "Kavi Fenrovu founded the society. It was led by Nydorlo Garauva.";
    assert_eq!(
        beside(founder, "Kivrun Society", society, "Kavi Fenrovu"),
        (false, true)
    );
    // The question's name beside a span is not its relation.
    let letters = "Nyquani's letters reveal a stubborn temperament.";
    assert_eq!(
        beside(
            "For which organisation did Zelya Nyquani work?",
            "Zelya Nyquani",
            letters,
            "letters"
        ),
        (false, false)
    );
    // Nor is a word of the document's title ("river" of "Dulgo River").
    let rise = "Where does the Dulgo River rise?";
    let river = "The river rises in Astob. Kesk river towns trade grain.";
    assert_eq!(beside(rise, "Dulgo River", river, "Astob"), (true, false));
    assert_eq!(beside(rise, "Dulgo River", river, "Kesk"), (false, false));
    let galleries = "It was used for lighting mine galleries, in 1850 and after.";
    let cut = |span: &str| {
        let at = galleries.find(span).unwrap();
        cuts_a_phrase(galleries, at + span.len())
    };
    assert!(cut("lighting"));
    assert!(cut("lighting mine"));
    assert!(!cut("lighting mine galleries"), "a comma ends it");
    assert!(!cut("It was used"), "\"for\" is a function word");
    assert!(!cut("in 1850 and"), "the next word is a function word");
    assert!(holds_a_clause(
        "Teipelsa Brinve was a little-known historian"
    ));
    assert!(!holds_a_clause("was a historian"));
    assert!(!holds_a_clause("historian"));
}

#[test]
fn calls_with_arguments_are_told_from_names_and_empty_calls() {
    assert!(is_call_with_arguments("is_dir(self)"));
    assert!(is_call_with_arguments("os.path.join(a, *p)"));
    assert!(!is_call_with_arguments("is_dir"));
    assert!(!is_call_with_arguments("bottom_panel()"));
    assert!(!is_call_with_arguments("the value (default)"));
    assert_eq!(names()[CALL], "call_with_arguments");
}

#[test]
fn stems_meet_across_inflections_and_derivations() {
    assert_eq!(stems("worked"), stems("work"));
    assert_eq!(stems("maintainer"), stems("maintains"));
    assert_eq!(stems("licence"), stems("license"));
    assert_eq!(stems("founded"), stems("founder"));
    assert_eq!(stems("the organisation"), ["organ"]);
    assert_ne!(stems("born"), stems("bone"));
    assert_eq!(stems("born"), stems("birth"));
    assert_eq!(stems("birthplace"), stems("birth"));
    assert_eq!(stems("died"), stems("death"));
    assert_eq!(stems("wrote"), stems("writes"));
}

#[test]
fn an_option_with_its_argument_is_told_from_the_option() {
    for with in [
        "--context=N",
        "--port tcp-port",
        "-o output_file",
        "--anchored=<text>",
    ] {
        assert!(is_option_with_argument(with), "{with}");
    }
    for bare in ["--context", "-o", "-resource-pressure", "a=b", "1 - 2"] {
        assert!(!is_option_with_argument(bare), "{bare}");
    }
}

#[test]
fn shapes_of_answers() {
    for agent in [
        "glassblower",
        "navigator",
        "zoologist",
        "historian",
        "a skilled engineer",
    ] {
        assert!(is_agent_noun(agent), "{agent}");
    }
    for not in [
        "poet",
        "Miller",
        "pointillism",
        "1877",
        "virtuoso",
        "order of the day",
        "displaced by cheaper",
        "however",
        "the river",
    ] {
        assert!(!is_agent_noun(not), "{not}");
    }
    assert_eq!(
        names().len(),
        SHAPE_BASE + ASKS * SHAPES + 8 + 2 * ASKS + 29
    );
    assert_eq!(names()[CUT_PHRASE], "cuts_a_phrase");
    assert_eq!(names()[AFTER_COPULA], "after_copula");
    assert_eq!(
        names()[NAMED_DEFAULT],
        "default_in_the_definition_of_a_term_the_question_names"
    );
    assert_eq!(names()[FILE_TITLE], "title_names_a_file");
    assert_eq!(names()[KIND_PLURAL], "plural_of_a_question_word");
    assert_eq!(names()[TOPIC_KEY], "key_of_a_value_the_question_spells");
    assert_eq!(
        names()[NAMED_CONTAINER],
        "member_of_a_container_the_question_names"
    );
    assert_eq!(
        names()[IN_SIGNATURE],
        "inside_a_signature_when_a_callable_is_asked"
    );
    assert_eq!(names()[TOPIC_TITLE], "title_phrase_sharing_a_question_word");
    assert_eq!(
        names()[NAMED_FUNCTION],
        "parameter_of_a_function_the_question_names"
    );
    assert_eq!(
        names()[NAMED_TERM],
        "in_the_definition_of_a_term_the_question_names"
    );
    assert_eq!(names()[DEFINITION], "on_a_term_line");
    assert_eq!(names()[DEFINITION + 3], "heads_a_list");
    assert_eq!(
        names()[MEMBER_TITLE],
        "title_when_the_question_asks_a_member"
    );
    assert_eq!(names()[BESIDE], "question_predicate_just_before");
    assert_eq!(names()[CLAUSE], "holds_a_clause");
    assert_eq!(names()[CUT_NAME], "cuts_a_name");
    assert_eq!(names()[OPTION_ARGUMENT], "option_with_its_argument");
    assert_eq!(
        names()[RANGE + 2],
        "range_last_when_the_question_asks_an_end"
    );
    assert_eq!(
        names()[AGENT + 1],
        "agent_noun_when_the_question_asks_description"
    );
    assert_eq!(
        names()[SIDES_BY_ASKS + 2 * Asks::Where.index() + 1],
        "question_words_after_x_asks_where"
    );
    assert_eq!(names()[NAMED_TITLE], "title_when_the_question_names_one");
    assert_eq!(names()[SIDES + 1], "question_words_after");
    assert_eq!(names()[AFTER_AS], "after_as");
    assert_eq!(names()[RELATION], "relation_similarity");
    assert_eq!(names()[CUE], "cue_fits_question");
    assert_eq!(names()[IN_CONTEXT], "in_context");
    assert_eq!(names()[LM_FEATURES.start], "lm_mean");
}

#[test]
fn a_default_is_stated_closely_after_default() {
    let at = |text: &str, span: &str| follows_default(text, text.find(span).unwrap());
    assert!(at("-height The height of the image. Default is 48.", "48"));
    assert!(at("Polling interval in seconds (default: 60).", "60"));
    assert!(at("The gamma defaults to 1.0 for all images.", "1.0"));
    assert!(at("The default value is 2.0.", "2.0"));
    assert!(
        !at("Sets the default. Use 5 for more.", "5"),
        "another sentence"
    );
    assert!(!at("Default options.\n-g 1.0", "1.0"), "another line");
    assert!(
        !at("The default mode, set by the administrator to 7", "7"),
        "too far"
    );
    assert!(at("The default is set to 3.", "3"));
    assert!(at("The default for the mode is 7", "7"));
    assert!(
        !at("The default value is 1.0", "value"),
        "the phrase, not its value"
    );
    assert!(
        !at("Default is 60 seconds.", "seconds"),
        "the unit after the value"
    );
}

#[test]
fn a_title_is_a_heading_where_it_is_numbered_or_heads_its_section() {
    use super::super::span_text::title_is_a_heading as heading;
    assert!(heading("1.3. The Inner Workings", None));
    assert!(heading("Preface", Some("Preface")));
    assert!(!heading("Preface", Some("A later section")));
    assert!(
        !heading("ppmtospu", Some("SYNOPSIS")),
        "a manual's synopsis line"
    );
    assert!(!heading("xsane", None));
    assert!(!heading("", Some("")));
}
