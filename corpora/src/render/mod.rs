//! Writing one document per entity: a lead sentence, fact sentences in varied wording
//! (direct or paraphrased), background sentences up to a drawn length, and for every
//! fact the question that asks it.

use std::collections::HashSet;

use crate::names::Namer;
use crate::rng::Dice;
use crate::text::{possessive, thousands, word_count, Filler, Form, Forms, Others};
use crate::world::{Ent, World, DEVICES, ORG_KINDS};
use crate::EntityKind;

mod templates;

use templates::{
    details, episodes, Spec, AREA, BIRTHPLACE, BIRTH_YEAR, CAPITAL, CITY_BG, CITY_LEADS,
    DEATH_YEAR, DEMO, ELEVATION, EMPLOYEES, EMPLOYER, FOUNDED, FOUNDER, GENERIC, HQ, INVENTED,
    INVENTION_BG, INVENTOR, LENGTH, MOUTH, OCCUPATION, ORG_BG, ORG_FOUNDED, ORG_LEADS, PEAK,
    PERSON_BG, POPULATION, PROVINCE, PROVINCE_BG, PROVINCE_LEADS, PURPOSE, RIVER, RIVER_BG,
    RIVER_LEADS, SOURCE, TIMES,
};

/// Percentage of fact sentences written in words the question does not use.
const PARAPHRASE_PERCENT: u32 = 40;
/// Percentage of documents written long (about 1,500 words).
const LONG_PERCENT: u32 = 2;
const MAX_WORDS: usize = 400;
const MAX_LONG_WORDS: usize = 1_800;

/// One askable fact of a document.
pub(crate) struct Fact {
    pub relation: &'static str,
    pub question: String,
    pub answers: Vec<String>,
    pub paraphrase: bool,
}

pub(crate) struct Rendered {
    pub title: String,
    pub kind: EntityKind,
    pub text: String,
    pub facts: Vec<Fact>,
}

// ---------------------------------------------------------------- rendering

fn person_forms(name: &str, family: &str, female: bool) -> Forms {
    let named = |n: &str| Form {
        s_cap: n.to_string(),
        s: n.to_string(),
        p_cap: possessive(n),
        p: possessive(n),
        o: n.to_string(),
    };
    let (s, p, o) = if female {
        ("she", "her", "her")
    } else {
        ("he", "his", "him")
    };
    let pronoun = Form {
        s_cap: crate::text::capitalise(s),
        s: s.to_string(),
        p_cap: crate::text::capitalise(p),
        p: p.to_string(),
        o: o.to_string(),
    };
    Forms {
        forms: vec![named(name), named(family), pronoun],
        weights: vec![40, 30, 30],
        pronoun: 2,
    }
}

/// `name_in_sentence` is e.g. "the Velna River" or "Osmarde"; `noun` e.g. "the river".
fn thing_forms(name_in_sentence: &str, noun: &str) -> Forms {
    let cap = crate::text::capitalise;
    let named = Form {
        s_cap: cap(name_in_sentence),
        s: name_in_sentence.to_string(),
        p_cap: cap(&possessive(name_in_sentence)),
        p: possessive(name_in_sentence),
        o: name_in_sentence.to_string(),
    };
    let common = Form {
        s_cap: cap(noun),
        s: noun.to_string(),
        p_cap: cap(&possessive(noun)),
        p: possessive(noun),
        o: noun.to_string(),
    };
    let pronoun = Form {
        s_cap: "It".into(),
        s: "it".into(),
        p_cap: "Its".into(),
        p: "its".into(),
        o: noun.to_string(),
    };
    Forms {
        forms: vec![named, common, pronoun],
        weights: vec![45, 25, 30],
        pronoun: 2,
    }
}

struct Writer<'a> {
    filler: Filler<'a>,
    sentences: Vec<String>,
    facts: Vec<Fact>,
}

impl Writer<'_> {
    /// Writes a fact's sentence (index 0 of the document when `lead`) and its question.
    fn fact(
        &mut self,
        dice: &mut Dice,
        spec: &Spec,
        value: &str,
        answers: Vec<String>,
        lead: bool,
    ) {
        let paraphrase = dice.chance(PARAPHRASE_PERCENT);
        let template = *dice.pick(if paraphrase { spec.para } else { spec.direct });
        self.fact_with(
            dice,
            spec,
            template,
            &[("v", value.to_string())],
            answers,
            paraphrase,
            lead,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn fact_with(
        &mut self,
        dice: &mut Dice,
        spec: &Spec,
        template: &str,
        values: &[(&'static str, String)],
        answers: Vec<String>,
        paraphrase: bool,
        lead: bool,
    ) {
        let sentence = self.with_values(values, |f| f.fill(dice, template, lead.then_some(0)));
        let q = *dice.pick(spec.questions);
        let question = self.filler.fill(dice, q, Some(0));
        debug_assert!(
            answers.iter().all(|a| sentence.contains(a.as_str())),
            "{sentence} / {answers:?}"
        );
        self.sentences.push(sentence);
        self.facts.push(Fact {
            relation: spec.relation,
            question,
            answers,
            paraphrase,
        });
    }

    /// Two direct facts stated in one sentence (e.g. "was born in X in 1843").
    fn fact_pair(
        &mut self,
        dice: &mut Dice,
        template: &str,
        a: (&Spec, &str, Vec<String>),
        b: (&Spec, &str, Vec<String>),
    ) {
        let values = [("v", a.1.to_string()), ("w", b.1.to_string())];
        let sentence = self.with_values(&values, |f| f.fill(dice, template, None));
        for (spec, answers) in [(a.0, a.2), (b.0, b.2)] {
            let q = *dice.pick(spec.questions);
            let question = self.filler.fill(dice, q, Some(0));
            self.facts.push(Fact {
                relation: spec.relation,
                question,
                answers,
                paraphrase: false,
            });
        }
        self.sentences.push(sentence);
    }

    fn with_values<R>(&self, values: &[(&'static str, String)], f: impl FnOnce(&Filler) -> R) -> R {
        let mut fixed: Vec<(&'static str, String)> = self.filler.fixed.to_vec();
        fixed.extend_from_slice(values);
        let filler = Filler {
            fixed: &fixed,
            ..self.filler
        };
        f(&filler)
    }

    fn plain(&mut self, dice: &mut Dice, templates: &[&str], lead: bool) {
        let t = *dice.pick(templates);
        let s = self.filler.fill(dice, t, lead.then_some(0));
        self.sentences.push(s);
    }
}

fn with_unit(n: u32, unit: &str) -> (String, Vec<String>) {
    let num = thousands(n);
    let v = format!("{num} {unit}");
    (v.clone(), vec![v, num])
}

/// Title, kind, name inside a sentence, forms, extra slots, background templates.
type Profile = (
    String,
    EntityKind,
    String,
    Forms,
    Vec<(&'static str, String)>,
    &'static [&'static str],
);

pub(crate) fn render(world: &World, ent: Ent, dice: &mut Dice, namer: &mut Namer) -> Rendered {
    let others = Others {
        cities: &world.city_names,
        persons: &world.person_names,
        provinces: &world.province_names,
    };
    // Title, kind, how the entity is named inside a sentence, its forms, extra slots.
    let (title, kind, in_sentence, forms, mut fixed, background): Profile = match ent {
        Ent::Person(i) => {
            let p = &world.persons[i];
            let forms = person_forms(&p.name, &p.family, p.female);
            (
                p.name.clone(),
                EntityKind::Person,
                p.name.clone(),
                forms,
                vec![("occ", p.occupation.into())],
                PERSON_BG,
            )
        }
        Ent::City(i) => {
            let c = &world.cities[i];
            let ctype = match c.population {
                0..=2_999 => "village",
                3_000..=59_999 => "town",
                _ => "city",
            };
            let forms = thing_forms(&c.name, &format!("the {ctype}"));
            (
                c.name.clone(),
                EntityKind::City,
                c.name.clone(),
                forms,
                vec![("ctype", ctype.into())],
                CITY_BG,
            )
        }
        Ent::Province(i) => {
            let p = &world.provinces[i];
            let forms = thing_forms(&p.name, "the province");
            (
                p.name.clone(),
                EntityKind::Province,
                p.name.clone(),
                forms,
                vec![],
                PROVINCE_BG,
            )
        }
        Ent::River(i) => {
            let r = &world.rivers[i];
            let name = format!("the {}", r.title);
            let forms = thing_forms(&name, "the river");
            (
                r.title.clone(),
                EntityKind::River,
                name,
                forms,
                vec![],
                RIVER_BG,
            )
        }
        Ent::Org(i) => {
            let o = &world.orgs[i];
            let (_, noun, desc) = ORG_KINDS[o.kind];
            let name = format!("the {}", o.title);
            let forms = thing_forms(&name, &format!("the {noun}"));
            (
                o.title.clone(),
                EntityKind::Organisation,
                name,
                forms,
                vec![("desc", desc.into())],
                ORG_BG,
            )
        }
        Ent::Invention(i) => {
            let inv = &world.inventions[i];
            let noun = DEVICES[inv.device].0;
            let name = format!("the {}", inv.title);
            let forms = thing_forms(&name, &format!("the {noun}"));
            (
                inv.title.clone(),
                EntityKind::Invention,
                name,
                forms,
                vec![("noun", noun.into())],
                INVENTION_BG,
            )
        }
    };
    fixed.push(("Q", in_sentence.clone()));
    fixed.push(("Qp", possessive(&in_sentence)));
    let mut w = Writer {
        filler: Filler {
            fixed: &fixed,
            forms: &forms,
            others: &others,
            own: &title,
        },
        sentences: Vec::new(),
        facts: Vec::new(),
    };

    match ent {
        Ent::Person(i) => {
            let p = &world.persons[i];
            let occ = p.occupation.to_string();
            w.fact(dice, &OCCUPATION, &occ, vec![occ.clone()], true);
            let (birth, death) = (p.birth.to_string(), p.death.to_string());
            let (year_direct, place_direct) = (
                !dice.chance(PARAPHRASE_PERCENT),
                !dice.chance(PARAPHRASE_PERCENT),
            );
            if year_direct && place_direct && dice.chance(60) {
                let t = *dice.pick(&[
                    "{S} was born in {w} in {v}.",
                    "{S} was born in {v} in {w}, the child of {family_trade}.",
                ]);
                w.fact_pair(
                    dice,
                    t,
                    (&BIRTH_YEAR, &birth, vec![birth.clone()]),
                    (&BIRTHPLACE, &p.birthplace, vec![p.birthplace.clone()]),
                );
            } else {
                for (spec, v, direct) in [
                    (&BIRTH_YEAR, &birth, year_direct),
                    (&BIRTHPLACE, &p.birthplace, place_direct),
                ] {
                    let t = *dice.pick(if direct { spec.direct } else { spec.para });
                    w.fact_with(
                        dice,
                        spec,
                        t,
                        &[("v", v.clone())],
                        vec![v.clone()],
                        !direct,
                        false,
                    );
                }
            }
            if let Some(e) = &p.employer {
                w.fact(dice, &EMPLOYER, e, vec![e.clone()], false);
            }
            w.fact(dice, &DEATH_YEAR, &death, vec![death.clone()], false);
        }
        Ent::City(i) => {
            let c = &world.cities[i];
            w.plain(dice, CITY_LEADS, true);
            let founded = c.founded.to_string();
            w.fact(dice, &FOUNDED, &founded, vec![founded.clone()], false);
            w.fact(
                dice,
                &PROVINCE,
                &c.province,
                vec![c.province.clone()],
                false,
            );
            if let Some(r) = c.river {
                let r = &world.rivers[r];
                w.fact(
                    dice,
                    &RIVER,
                    &r.title,
                    vec![r.title.clone(), r.short.clone()],
                    false,
                );
            }
            let pop = thousands(c.population);
            w.fact(dice, &POPULATION, &pop, vec![pop.clone()], false);
            let (v, answers) = with_unit(c.elevation, "metres");
            w.fact(dice, &ELEVATION, &v, answers, false);
        }
        Ent::Province(i) => {
            let p = &world.provinces[i];
            w.plain(dice, PROVINCE_LEADS, true);
            w.fact(dice, &CAPITAL, &p.capital, vec![p.capital.clone()], false);
            let pop = thousands(p.population);
            w.fact(dice, &POPULATION, &pop, vec![pop.clone()], false);
            let (v, answers) = with_unit(p.area, "square kilometres");
            w.fact(dice, &AREA, &v, answers, false);
            let short = p.peak.trim_start_matches("Mount ").to_string();
            w.fact(dice, &PEAK, &p.peak, vec![p.peak.clone(), short], false);
        }
        Ent::River(i) => {
            let r = &world.rivers[i];
            w.plain(dice, RIVER_LEADS, true);
            let (v, answers) = with_unit(r.length, "kilometres");
            w.fact(dice, &LENGTH, &v, answers, false);
            w.fact(
                dice,
                &SOURCE,
                &r.source.0,
                vec![r.source.0.clone(), r.source.1.clone()],
                false,
            );
            w.fact(
                dice,
                &MOUTH,
                &r.mouth.0,
                vec![r.mouth.0.clone(), r.mouth.1.clone()],
                false,
            );
        }
        Ent::Org(i) => {
            let o = &world.orgs[i];
            w.plain(dice, ORG_LEADS, true);
            let year = o.founded.to_string();
            if dice.chance(35) {
                w.fact_pair(
                    dice,
                    "{S} was founded in {v} by {w}.",
                    (&ORG_FOUNDED, &year, vec![year.clone()]),
                    (&FOUNDER, &o.founder, vec![o.founder.clone()]),
                );
            } else {
                w.fact(dice, &ORG_FOUNDED, &year, vec![year.clone()], false);
                w.fact(dice, &FOUNDER, &o.founder, vec![o.founder.clone()], false);
            }
            w.fact(dice, &HQ, &o.hq, vec![o.hq.clone()], false);
            let staff = thousands(o.employees);
            w.fact(dice, &EMPLOYEES, &staff, vec![staff.clone()], false);
        }
        Ent::Invention(i) => {
            let inv = &world.inventions[i];
            let purpose = DEVICES[inv.device].1;
            w.fact(dice, &PURPOSE, purpose, vec![purpose.to_string()], true);
            let year = inv.year.to_string();
            if dice.chance(35) {
                w.fact_pair(
                    dice,
                    "{S} was invented by {w} in {v}.",
                    (&INVENTED, &year, vec![year.clone()]),
                    (&INVENTOR, &inv.inventor, vec![inv.inventor.clone()]),
                );
            } else {
                w.fact(
                    dice,
                    &INVENTOR,
                    &inv.inventor,
                    vec![inv.inventor.clone()],
                    false,
                );
                w.fact(dice, &INVENTED, &year, vec![year.clone()], false);
            }
            w.fact(dice, &DEMO, &inv.demo, vec![inv.demo.clone()], false);
        }
    }

    // Background sentences, inserted between the fact sentences, up to a drawn length.
    let long = dice.chance(LONG_PERCENT);
    let (target, max) = if long {
        (dice.range(1_300, 1_650) as usize, MAX_LONG_WORDS)
    } else {
        (dice.range(90, 360) as usize, MAX_WORDS)
    };
    // Each background template at most once per document; episodes ("{time}, ...")
    // combine freely, so long documents can grow without repeating a sentence.
    let episodes = episodes(kind);
    let mut words: usize = w.sentences.iter().map(|s| word_count(s)).sum();
    let mut seen: HashSet<String> = w.sentences.iter().cloned().collect();
    let mut used_templates: HashSet<&str> = HashSet::new();
    let details = details(kind);
    let mut misses = 0;
    while words < target && misses < 200 {
        // Generic, background and episode templates serve once per document, and so do
        // details (which name things invented on the spot) except in long documents.
        let category = dice.weighted(&[15, 45, 28, 12]);
        let pool = [GENERIC, background, episodes, details][category];
        let mut fresh: Vec<&str> = pool
            .iter()
            .copied()
            .filter(|t| !used_templates.contains(t))
            .collect();
        let mut category = category;
        if fresh.is_empty() {
            category = 3;
            fresh = details
                .iter()
                .copied()
                .filter(|t| long || !used_templates.contains(t))
                .collect();
            if fresh.is_empty() {
                misses += 1;
                continue;
            }
        }
        let t = *dice.pick(&fresh);
        used_templates.insert(t);
        let s = match category {
            2 => {
                let t = format!("{}, {t}.", dice.pick(TIMES));
                w.filler.fill(dice, &t, None)
            }
            3 => {
                let t = t.replace("{time}", dice.word(TIMES));
                let coined = [
                    ("coined", namer.word(dice, 2, 3)),
                    ("coined2", namer.word(dice, 2, 3)),
                ];
                w.with_values(&coined, |f| f.fill(dice, &t, None))
            }
            _ => w.filler.fill(dice, t, None),
        };
        let n = word_count(&s);
        if words + n > max || !seen.insert(s.clone()) {
            misses += 1;
            continue;
        }
        words += n;
        let at = 1 + dice.below(w.sentences.len());
        w.sentences.insert(at, s);
    }

    // Paragraphs of three to six sentences.
    let mut text = String::with_capacity(words * 7);
    let mut left_in_paragraph = dice.range(3, 6);
    for (k, s) in w.sentences.iter().enumerate() {
        if k > 0 {
            if left_in_paragraph == 0 {
                text.push_str("\n\n");
                left_in_paragraph = dice.range(3, 6);
            } else {
                text.push(' ');
            }
        }
        text.push_str(s);
        left_in_paragraph -= 1;
    }
    let facts = w.facts;
    Rendered {
        title,
        kind,
        text,
        facts,
    }
}
