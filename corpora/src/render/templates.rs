//! The encyclopedia's wording: each relation's sentence templates (direct and
//! paraphrased) and questions, and the lead, background, episode and detail phrases of
//! each kind of entity. Pure data; `super` writes documents from it.

use crate::EntityKind;

/// Templates of one relation. `{v}` is the value; questions use `{Q}` (the entity's
/// name inside a sentence) and `{Qp}` (its possessive).
pub(super) struct Spec {
    pub(super) relation: &'static str,
    pub(super) direct: &'static [&'static str],
    pub(super) para: &'static [&'static str],
    pub(super) questions: &'static [&'static str],
}

// ---------------------------------------------------------------- people

pub(super) const OCCUPATION: Spec = Spec {
    relation: "occupation",
    direct: &[
        "{S} was {a_v} by profession.",
        "By profession, {s} was {a_adjp} {v}.",
    ],
    para: &[
        "{S} was {a_adjp} {v}.",
        "{S} made {ps} name as {a_v}.",
        "{S} worked for most of {ps} life as {a_v}.",
    ],
    questions: &[
        "What was {Qp} profession?",
        "What did {Q} do for a living?",
        "What was {Qp} occupation?",
    ],
};
pub(super) const BIRTH_YEAR: Spec = Spec {
    relation: "birth year",
    direct: &[
        "{S} was born in {v}.",
        "{S} was born in {v} into a family of {family_trade}.",
        "Born in {v}, {s} grew up in {childhood}.",
    ],
    para: &[
        "{S} came into the world in {v}.",
        "{Ps} life began in {v}, a year of {year_event}.",
        "Parish records give {v} as the year of {ps} birth.",
        "{S} entered the world in {v}.",
    ],
    questions: &[
        "In what year was {Q} born?",
        "When was {Q} born?",
        "What year was {Q} born in?",
    ],
};
pub(super) const BIRTHPLACE: Spec = Spec {
    relation: "birthplace",
    direct: &[
        "{S} was born in {v}.",
        "{S} was born in {v}, where {ps} parents kept {a_shop}.",
    ],
    para: &[
        "{S} was a native of {v}.",
        "{S} hailed from {v}.",
        "{S} came from {v}, where {ps} family had long been settled.",
    ],
    questions: &[
        "Where was {Q} born?",
        "In which town was {Q} born?",
        "What was the birthplace of {Q}?",
    ],
};
pub(super) const DEATH_YEAR: Spec = Spec {
    relation: "death year",
    direct: &[
        "{S} died in {v}.",
        "{S} died in {v} after a long illness.",
        "{S} died in {v}, leaving {ps} papers to {heir}.",
    ],
    para: &[
        "{S} passed away in {v}.",
        "{Ps} death came in {v}, after {death_cause}.",
        "{S} lived until {v}.",
        "The year {v} brought {ps} long career to an end.",
    ],
    questions: &["In what year did {Q} die?", "When did {Q} die?"],
};
pub(super) const EMPLOYER: Spec = Spec {
    relation: "employer",
    direct: &[
        "{S} worked for the {v} for {num_word} years.",
        "For much of {ps} career {s} worked for the {v}.",
    ],
    para: &[
        "{S} spent {num_word} years in the service of the {v}.",
        "{S} held a post at the {v}.",
        "{S} was on the staff of the {v} for a time.",
    ],
    questions: &[
        "Which organisation did {Q} work for?",
        "For which organisation did {Q} work?",
    ],
};

// ---------------------------------------------------------------- places

pub(super) const FOUNDED: Spec = Spec {
    relation: "founded",
    direct: &[
        "{S} was founded in {v}.",
        "{S} was founded in {v} as {a_origin}.",
    ],
    para: &[
        "{Ps} charter dates from {v}.",
        "The first settlers arrived at the site of {o} in {v}.",
        "{S} grew up around {a_origin} built in {v}.",
    ],
    questions: &["In what year was {Q} founded?", "When was {Q} founded?"],
};
pub(super) const POPULATION: Spec = Spec {
    relation: "population",
    direct: &[
        "{S} has a population of {v}.",
        "{Ps} population stood at {v} at the last count.",
    ],
    para: &[
        "{S} is home to some {v} residents.",
        "About {v} people make their homes in {o}.",
        "At the most recent census {s} counted {v} inhabitants.",
    ],
    questions: &[
        "What is the population of {Q}?",
        "How many people live in {Q}?",
    ],
};
pub(super) const RIVER: Spec = Spec {
    relation: "river",
    direct: &[
        "The {v} flows through {o}.",
        "The {v} flows through {o} on its way to the sea.",
    ],
    para: &[
        "{S} lies on the banks of the {v}.",
        "{S} straddles the {v}.",
        "The {v} divides {o} into an old and a new quarter.",
    ],
    questions: &[
        "Which river flows through {Q}?",
        "What river flows through {Q}?",
    ],
};
pub(super) const PROVINCE: Spec = Spec {
    relation: "province",
    direct: &[
        "{S} is located in the province of {v}.",
        "{S} lies in the province of {v}.",
    ],
    para: &[
        "{S} belongs administratively to {v}.",
        "{S} is administered as part of {v}.",
        "{S} sits in the {dir} of {v}.",
    ],
    questions: &[
        "In which province is {Q} located?",
        "Which province is {Q} in?",
    ],
};
pub(super) const ELEVATION: Spec = Spec {
    relation: "elevation",
    direct: &[
        "{S} lies at an elevation of {v}.",
        "{S} sits at an elevation of {v} above sea level.",
    ],
    para: &[
        "{S} stands {v} above the sea.",
        "{Ps} main square stands {v} higher than the coast.",
    ],
    questions: &[
        "At what elevation does {Q} lie?",
        "What is the elevation of {Q}?",
    ],
};
pub(super) const CAPITAL: Spec = Spec {
    relation: "capital",
    direct: &["{Ps} capital is {v}.", "{S} has its capital at {v}."],
    para: &[
        "{S} is governed from {v}.",
        "The provincial council sits in {v}.",
        "{Ps} seat of government is {v}.",
    ],
    questions: &[
        "What is the capital of {Q}?",
        "Which town is the capital of {Q}?",
    ],
};
pub(super) const PEAK: Spec = Spec {
    relation: "highest mountain",
    direct: &[
        "The highest mountain in the province is {v}.",
        "{Ps} highest mountain is {v}.",
    ],
    para: &[
        "{S} reaches its greatest height at {v}.",
        "The loftiest summit in the province is {v}.",
    ],
    questions: &[
        "What is the highest mountain in {Q}?",
        "Which mountain is the highest in {Q}?",
    ],
};
pub(super) const AREA: Spec = Spec {
    relation: "area",
    direct: &["{S} has an area of {v}.", "{S} covers an area of {v}."],
    para: &["{S} extends over {v}.", "{S} spans roughly {v}."],
    questions: &["What is the area of {Q}?", "How large is the area of {Q}?"],
};
pub(super) const LENGTH: Spec = Spec {
    relation: "length",
    direct: &["{S} is {v} long.", "{S} has a length of {v}."],
    para: &[
        "{S} runs for {v} from source to mouth.",
        "From its source to its mouth, {s} covers {v}.",
    ],
    questions: &["How long is {Q}?", "What is the length of {Q}?"],
};
pub(super) const SOURCE: Spec = Spec {
    relation: "source",
    direct: &[
        "{S} rises on the slopes of {v}.",
        "{Ps} source lies on {v}.",
    ],
    para: &[
        "{S} begins as a spring beneath {v}.",
        "{Ps} headwaters gather below {v}.",
    ],
    questions: &["Where does {Q} rise?", "Where is the source of {Q}?"],
};
pub(super) const MOUTH: Spec = Spec {
    relation: "mouth",
    direct: &[
        "{S} flows into the {v}.",
        "{S} flows into the {v} through a wide delta.",
    ],
    para: &[
        "{S} empties into the {v}.",
        "{S} ends its course in the {v}.",
        "{S} reaches the {v} through a maze of channels.",
    ],
    questions: &[
        "Into which sea does {Q} flow?",
        "Which sea does {Q} flow into?",
    ],
};

// ---------------------------------------------------------------- organisations, things

pub(super) const ORG_FOUNDED: Spec = Spec {
    relation: "founded",
    direct: &[
        "{S} was founded in {v}.",
        "{S} was founded in {v} in a pair of rented rooms.",
    ],
    para: &[
        "{S} was established in {v}.",
        "{S} traces its origins to {v}.",
        "{S} opened its doors in {v}.",
        "{Ps} history begins in {v}.",
    ],
    questions: &["In what year was {Q} founded?", "When was {Q} founded?"],
};
pub(super) const FOUNDER: Spec = Spec {
    relation: "founder",
    direct: &[
        "{S} was founded by {v}.",
        "{v} founded {o} with money borrowed from relatives.",
    ],
    para: &[
        "{S} was set up by {v}.",
        "{S} owes its existence to {v}.",
        "{v} established {o} after years of planning.",
    ],
    questions: &["Who founded {Q}?", "Who was the founder of {Q}?"],
};
pub(super) const HQ: Spec = Spec {
    relation: "headquarters",
    direct: &[
        "{S} is headquartered in {v}.",
        "{Ps} headquarters are in {v}.",
    ],
    para: &[
        "{Ps} main offices stand in {v}.",
        "{S} is run from a large building in {v}.",
        "{S} has its seat in {v}.",
    ],
    questions: &[
        "Where is {Q} headquartered?",
        "In which town are the headquarters of {Q}?",
    ],
};
pub(super) const EMPLOYEES: Spec = Spec {
    relation: "employees",
    direct: &[
        "{S} employs about {v} people.",
        "{S} employs some {v} staff.",
    ],
    para: &[
        "{S} has a workforce of roughly {v}.",
        "Some {v} people work for {o}.",
        "{Ps} payroll lists around {v} names.",
    ],
    questions: &[
        "How many people does {Q} employ?",
        "How many employees does {Q} have?",
    ],
};
pub(super) const PURPOSE: Spec = Spec {
    relation: "purpose",
    direct: &[
        "{S} is {a_iadj} {noun} used for {v}.",
        "{S} is {a_noun} that was widely used for {v}.",
    ],
    para: &[
        "{S} is {a_iadj} {noun} designed for {v}.",
        "{S} is {a_noun} built to make {v} easier.",
    ],
    questions: &["What is {Q} used for?", "What was {Q} used for?"],
};
pub(super) const INVENTOR: Spec = Spec {
    relation: "inventor",
    direct: &[
        "{S} was invented by {v}.",
        "{v} invented {o} after several failed attempts.",
    ],
    para: &[
        "{S} was devised by {v}.",
        "{S} is credited to {v}.",
        "The design of {o} is the work of {v}.",
    ],
    questions: &["Who invented {Q}?", "Who was the inventor of {Q}?"],
};
pub(super) const INVENTED: Spec = Spec {
    relation: "invention year",
    direct: &["{S} was invented in {v}."],
    para: &[
        "{S} was first built in {v}.",
        "The first working example of {o} appeared in {v}.",
        "A patent for {o} was granted in {v}.",
    ],
    questions: &["In what year was {Q} invented?", "When was {Q} invented?"],
};
pub(super) const DEMO: Spec = Spec {
    relation: "first demonstration",
    direct: &[
        "{S} was first demonstrated in {v}.",
        "{S} was first demonstrated publicly in {v}.",
    ],
    para: &[
        "{S} was first shown to the public in {v}.",
        "The earliest public trial of {o} took place in {v}.",
    ],
    questions: &[
        "Where was {Q} first demonstrated?",
        "In which town was {Q} first demonstrated?",
    ],
};

// ---------------------------------------------------------------- leads and background

pub(super) const CITY_LEADS: &[&str] = &[
    "{S} is {a_cadj} {ctype} known for its {cfeature}.",
    "{S} is {a_cadj} {ctype} with a long tradition of {trade}.",
];
pub(super) const PROVINCE_LEADS: &[&str] = &[
    "{S} is {a_padj} province known for its {pfeature}.",
    "{S} is {a_padj} province with a long tradition of {trade}.",
];
pub(super) const RIVER_LEADS: &[&str] = &[
    "{S} is {a_radj} river known for its {rfeature}.",
    "{S} is {a_radj} river that has long carried {rtrade}.",
];
pub(super) const ORG_LEADS: &[&str] = &[
    "{S} is {desc}.",
    "{S} is {desc}, with a reputation for {virtue}.",
];

pub(super) const GENERIC: &[&str] = &[
    "Accounts from the period are fragmentary, and some details remain uncertain.",
    "Much of what is known comes from {source}.",
    "Modern scholars have reassessed several of the older claims.",
    "The surviving records were catalogued only in recent decades.",
    "A short {genre} published much later drew renewed attention to this history.",
    "Some of the original documents were damaged by {disaster}.",
    "Opinions on these matters have shifted considerably over time.",
    "Later writers often repeated these accounts without checking them.",
    "Several details given here are drawn from {source}.",
];
pub(super) const PERSON_BG: &[&str] = &[
    "{S} kept detailed notebooks, most of which are now lost.",
    "{S} corresponded for many years with {other_person}.",
    "Contemporaries described {o} as {trait} and {trait2}.",
    "{Ps} early education was {edu_adj}, and {s} later claimed to have learned more from {teacher} than from any school.",
    "During a long journey to {other_city}, {s} filled several sketchbooks with {sketch}.",
    "{Ps} reputation rose and fell several times over the following decades.",
    "Several of {ps} {work_pl} survive in private collections.",
    "{S} was known for {habit}.",
    "Historians disagree about how much of the work attributed to {o} was in fact {ps} own.",
    "A {monument} in {other_city} commemorates {ps} work.",
    "{S} took on {num_word} apprentices over the years.",
    "{Ps} letters reveal {a_trait} temperament and a fondness for {pastime}.",
    "{S} spent {num_word} winters in {other_city}, working in a rented room above {a_shop}.",
    "Late in life, {s} returned to questions that had occupied {o} as a young {occ}.",
    "{S} often worked alongside {other_person}, although the two eventually quarrelled.",
    "Friends remembered {o} as {a_trait} host and a tireless talker.",
    "{S} published little during {ps} lifetime.",
    "{Ps} methods were later adopted by a generation of younger {occ}s.",
    "{S} was admired by {other_person}, who wrote about {o} at length.",
];
pub(super) const CITY_BG: &[&str] = &[
    "The old quarter of {o} is known for its {building_pl} and narrow {street_pl}.",
    "{S} holds {a_festival} every {season}, which draws visitors from {other_city}.",
    "{Ps} economy has long depended on {trade} and {trade2}.",
    "A {bridge_adj} bridge of {material} links the two halves of the {ctype}.",
    "The market square of {o} is lined with {building_pl}.",
    "{S} suffered badly during {disaster} and was partly rebuilt afterwards.",
    "The surrounding countryside is given over to {crop} fields and {landscape}.",
    "A road connects {o} with {other_city}, {num_word} days' journey away by cart.",
    "Local tradition holds that the {ctype} takes its name from {name_origin}.",
    "People from {o} are known in the region for {custom}.",
    "The {ctype} council meets in {a_building} on the main square.",
    "Notable residents of {o} have included {other_person} and {other_person2}.",
    "{S} has a small museum devoted to {museum_topic}.",
    "In {season}, the streets of {o} fill with stalls selling {goods}.",
    "The {ctype} has {num_word} churches and a single {school}.",
    "Travellers often remark on the {cquality} of {o}.",
];
pub(super) const PROVINCE_BG: &[&str] = &[
    "The landscape of {o} ranges from {landscape} in the {dir} to {landscape2} in the {dir2}.",
    "{Ps} economy rests on {trade}, {trade2} and, increasingly, {trade3}.",
    "{S} is divided into {num_word} districts, each with its own council.",
    "Roads across {o} link it with neighbouring {other_province}.",
    "Winters in {o} are {winter}, and summers are {summer}.",
    "Dialects spoken in {o} differ noticeably from those of {other_province}.",
    "Much of {o} is covered by {landscape}.",
    "{S} has a reputation for {custom}.",
    "The provincial archive holds records going back several centuries.",
    "Agriculture in {o} is dominated by {crop} and {crop2}.",
    "{S} sends {num_word} delegates to the national assembly.",
    "Several old trade routes cross {o} from {dir} to {dir2}.",
];
pub(super) const RIVER_BG: &[&str] = &[
    "{S} is navigable by small boats for much of its course.",
    "{Ps} waters are known for {fish} and {fish2}.",
    "Several {mill_pl} once stood along {ps} banks.",
    "In spring, melting snow often causes {o} to flood the surrounding {landscape}.",
    "The valley of {o} has been farmed for many centuries.",
    "{Ps} name is said to derive from an old word meaning '{meaning}'.",
    "Fishermen on {o} still use {boat_pl} of a traditional design.",
    "{S} freezes over in particularly cold winters.",
    "{Ps} tributaries drain a wide area of {landscape}.",
    "Painters have long been drawn to the {rscene} along {o}.",
    "A towpath follows {o} for a considerable distance.",
    "Efforts to clean {o} have brought back {fish} in recent years.",
    "The lower course of {o} is lined with {landscape}.",
];
pub(super) const ORG_BG: &[&str] = &[
    "{S} publishes an annual report on {topic}.",
    "Over the years {s} has opened branches in {other_city} and {other_city2}.",
    "{Ps} early years were marked by {hardship}.",
    "{Ps} archives contain thousands of {doc_pl}.",
    "{S} was reorganised several times during its history.",
    "Membership was originally limited to {members}.",
    "{S} has been praised for {virtue} and criticised for {vice}.",
    "The emblem of {o} shows {a_emblem}.",
    "{S} awards a yearly prize for {prize_topic}.",
    "{S} is governed by a board of {num_word} members.",
    "Relations between {o} and its rivals were often tense.",
    "{S} came through {disaster} with only minor losses.",
    "For a time {s} also ran a school for apprentices.",
];
pub(super) const INVENTION_BG: &[&str] = &[
    "Early versions of {o} were made of {material}.",
    "{S} was widely copied within a few years of its appearance.",
    "Critics at first doubted that {o} would ever be practical.",
    "Later models added {a_part} and {a_part2}.",
    "Examples of {o} can be seen in the museum of {museum_topic} in {other_city}.",
    "The mechanism relies on {a_part} that must be adjusted by hand.",
    "Its success encouraged a number of imitators.",
    "{S} remained in use until it was displaced by cheaper alternatives.",
    "Skilled operators could {operate_feat} with {o}.",
    "Workshops in {other_city} later made copies of {o} in large numbers.",
    "Keeping {o} in good order required {maint}.",
    "{S} was praised at several exhibitions.",
    "Some surviving examples of {o} still work.",
];

pub(super) const TIMES: &[&str] = &[
    "Some years later",
    "Shortly afterwards",
    "In the following decade",
    "Around the same time",
    "Not long after",
    "Over one long winter",
    "Later on",
    "At one point",
    "Early on",
    "Within a few years",
    "In a difficult period",
    "Eventually",
    "After some delay",
    "During a prosperous period",
];
const PERSON_EPISODES: &[&str] = &[
    "{s} travelled to {other_city} to study {sketch}",
    "{s} quarrelled publicly with {other_person}",
    "{s} took lodgings in {other_city}",
    "{s} gave a series of lectures in {other_city}",
    "{s} completed a set of {work_pl} for {other_person}",
    "{s} fell seriously ill but recovered",
    "{s} lost most of {ps} savings in a failed venture",
    "{s} was elected to a local council",
    "{s} received a commission from {other_person}",
    "{s} began a long friendship with {other_person}",
    "{s} moved to a house outside {other_city}",
    "{s} refused an invitation to work in {other_city}",
    "{s} destroyed a number of early {work_pl}",
    "{s} spent several months in {other_city} copying old records",
    "{s} shared a workshop with {other_person}",
];
const CITY_EPISODES: &[&str] = &[
    "the {ctype} council paved the main street of {o}",
    "a new road to {other_city} was opened",
    "merchants from {other_city} settled in {o}",
    "{s} was struck by {disaster}",
    "the market of {o} was moved to a larger square",
    "a new church was built in the old quarter of {o}",
    "a railway line reached {o}",
    "{s} signed a trade agreement with {other_city}",
    "the old walls of {o} were pulled down",
    "a hospital opened in {o}",
    "{s} hosted a gathering of {members}",
    "a dispute with {other_city} over grazing rights was settled",
    "{s} lost much of its {trade} trade",
    "{other_person} paid for a new library in {o}",
];
const PROVINCE_EPISODES: &[&str] = &[
    "{s} was reorganised into new districts",
    "roads linking {o} with {other_province} were improved",
    "a drought hit the {dir} of {o}",
    "{s} saw a wave of emigration",
    "the provincial council moved to a new building",
    "new mines were opened in the hills of {o}",
    "{s} hosted a great fair",
    "a bitter dispute with {other_province} was resolved",
    "{crop} farming spread across {o}",
    "a canal was dug across the {dir} of {o}",
    "{other_person} drew up a new map of {o}",
    "{s} was struck by {disaster}",
];
const RIVER_EPISODES: &[&str] = &[
    "{s} changed its course after {disaster}",
    "engineers straightened a stretch of {o}",
    "a new bridge was built over {o}",
    "boatmen on {o} went on strike",
    "a dam was planned on {o} but never built",
    "{s} flooded large parts of its valley",
    "{fish} returned to {o}",
    "a lock was built on the lower course of {o}",
    "{s} froze solid for several weeks",
    "traders from {other_city} used {o} to move {rtrade}",
    "{other_person} surveyed the upper course of {o}",
    "mills along {o} were converted to new uses",
];
const ORG_EPISODES: &[&str] = &[
    "{s} moved into larger premises",
    "{s} took over a rival in {other_city}",
    "{s} nearly went bankrupt",
    "{s} opened a branch in {other_city}",
    "{s} was led for a time by {other_person}",
    "{s} began to publish a journal",
    "{s} lost a long lawsuit",
    "{s} admitted its first foreign members",
    "{s} received a large bequest from {other_person}",
    "{s} changed its statutes",
    "{s} moved its archives to a new building",
    "{s} was investigated for irregular accounts",
];
const INVENTION_EPISODES: &[&str] = &[
    "an improved version of {o} appeared",
    "{s} was adopted in {other_city}",
    "a cheaper copy of {o} appeared in {other_city}",
    "{s} was exhibited in {other_city}",
    "a serious accident involving {o} led to new safety rules",
    "{s} was adapted for use on ships",
    "{s} was fitted with {a_part}",
    "demand for {o} fell sharply",
    "{other_person} wrote a manual for {o}",
    "{s} was sold in large numbers",
    "a dispute over the rights to {o} reached the courts",
    "{other_person} proposed a simpler form of {o}",
];

const PERSON_DETAILS: &[&str] = &[
    "{time}, {s} completed the {coined} {workname}, {a_workdesc}.",
    "{time}, {s} stayed with the {coined} family in {other_city}.",
    "{time}, {s} took on a pupil named {coined} {coined2}.",
    "{time}, {s} visited the estate of {coined} near {other_city}.",
    "{Ps} {coined} {workname}, {a_workdesc}, is now kept in {other_city}.",
];
const CITY_DETAILS: &[&str] = &[
    "{time}, the {coined} gate of {o} was rebuilt in {material}.",
    "{coined} Street, one of the oldest in {o}, is lined with {building_pl}.",
    "{time}, a new quarter called {coined} was laid out on the edge of {o}.",
    "The {coined} family ran the largest {shop} in {o} for several generations.",
    "The {coined} spring, just outside {o}, was once thought to cure fevers.",
];
const PROVINCE_DETAILS: &[&str] = &[
    "{time}, the district of {coined} was merged with its neighbour {coined2}.",
    "The {coined} valley in the {dir} of {o} is known for its {crop} fields.",
    "{time}, the mine at {coined} was closed.",
    "The village of {coined} in {o} is known for {custom}.",
    "Lake {coined} lies in the {dir} of {o}, surrounded by {landscape}.",
];
const RIVER_DETAILS: &[&str] = &[
    "The {coined} stream joins {o} from the {dir}.",
    "{time}, the ferry at {coined} was replaced by a {bridge_adj} bridge.",
    "The {coined} rapids are among the most dangerous stretches of {o}.",
    "Near the hamlet of {coined}, {o} widens into a shallow lake.",
    "{time}, a mill at {coined} on {o} burned down.",
];
const ORG_DETAILS: &[&str] = &[
    "{time}, {s} appointed {coined} {coined2} as its secretary.",
    "{time}, {s} acquired the {coined} works.",
    "The {coined} medal of {o} is awarded every few years.",
    "{time}, a quarrel between {coined} {coined2} and the board divided {o}.",
    "The {coined} collection of {o} holds many early {doc_pl}.",
];
const INVENTION_DETAILS: &[&str] = &[
    "{time}, a workshop run by the {coined} brothers improved {o}.",
    "A variant known as the {coined} pattern was popular for a while.",
    "{time}, {o} was shown to a committee chaired by {coined} {coined2}.",
    "The {coined} company made a smaller model of {o}.",
    "{time}, a trial of {o} at {coined} ended in failure.",
];

pub(super) fn details(kind: EntityKind) -> &'static [&'static str] {
    match kind {
        EntityKind::Person => PERSON_DETAILS,
        EntityKind::City => CITY_DETAILS,
        EntityKind::Province => PROVINCE_DETAILS,
        EntityKind::River => RIVER_DETAILS,
        EntityKind::Organisation => ORG_DETAILS,
        EntityKind::Invention => INVENTION_DETAILS,
    }
}

pub(super) fn episodes(kind: EntityKind) -> &'static [&'static str] {
    match kind {
        EntityKind::Person => PERSON_EPISODES,
        EntityKind::City => CITY_EPISODES,
        EntityKind::Province => PROVINCE_EPISODES,
        EntityKind::River => RIVER_EPISODES,
        EntityKind::Organisation => ORG_EPISODES,
        EntityKind::Invention => INVENTION_EPISODES,
    }
}
